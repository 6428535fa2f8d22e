/* Quantized GGUF weights in the networks:
 *  - binding: a linear weight whose rows are whole blocks stays in its
 *    block format on the backend (the same bytes as the file), one whose
 *    rows are not is dequantized to the load dtype, convolution kernels,
 *    norms and embedding tables are f32 / f16 (sd_weights.h);
 *  - the fixture UNets converted to q8_0 / q4_0 / q4_K: the relative L2
 *    error of every denoiser call against diffusers' f32 output stays within
 *    a bound per type (measured: see k_bound);
 *  - a random UNet 256 channels wide (the fixtures' rows are too short for
 *    256-element k-quant blocks): converted to q8_0, q4_0, q4_K, q5_K, q6_K,
 *    its output against the f32 file's, and against the f32 file holding the
 *    dequantized weights (rbee quantize to f32), which leaves only the
 *    quantization of the activations inside rb_matmul; and with f16
 *    activations (act_dtype), the quantized products taking f16 inputs. */
#include "test_sd_gguf_util.h"

#include "sd/sd_nets.h"

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

static const rb_st_tensor *lookup(const sd_weights *w, const char *name) {
    return sd_name_map_find((const sd_name_map *)w->lookup_ctx, name);
}

static void test_binding_dtypes(void **state) {
    (void)state;
    char path[512];
    convert_pipe(path, sizeof path, g_tmp, "sd15", RB_Q8_0);
    sd_gguf *f = NULL;
    TU_OK(sd_gguf_open(path, &f, NULL));
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    const sd_name_map *unet = sd_gguf_component_map(&f->ldm, f->cfg.family, SD_GGUF_UNET);
    const sd_name_map *text = sd_gguf_component_map(&f->ldm, f->cfg.family, SD_GGUF_TEXT);
    static const rb_dtype loads[2] = {RB_F32, RB_F16};
    for (int k = 0; k < 2; k++) {
        const rb_sd_load_opts o = {.weight_dtype = loads[k]};
        sd_weights ws;
        TU_OK(sd_weights_init_source(&ws, &f->src, lookup, (void *)unet, "unet", be, &o, NULL));
        rb_tensor t;
        /* 32-wide rows: whole q8_0 blocks, kept as they are */
        const char *q = "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight";
        const int64_t ne32[2] = {32, 32};
        TU_OK(sd_weights_get(&ws, q, SD_W_MAT, 2, ne32, true, &t, NULL, NULL));
        assert_int_equal(t.dtype, RB_Q8_0);
        const rb_st_tensor *st = sd_name_map_find(unet, q);
        uint8_t *bytes = malloc(st->nbytes);
        TU_OK(rb_tensor_get(&t, bytes, st->nbytes));
        assert_memory_equal(bytes, st->data, st->nbytes);
        free(bytes);
        /* 16-wide rows (stored f16): the load dtype */
        const int64_t ne16[2] = {16, 16};
        TU_OK(sd_weights_get(&ws, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight", SD_W_MAT, 2,
                             ne16, true, &t, NULL, NULL));
        assert_int_equal(t.dtype, loads[k]);
        /* convolution kernels (stored f16): f16 for f16 weights, else f32 */
        const int64_t nc[4] = {3, 3, 4, 16};
        TU_OK(sd_weights_get(&ws, "conv_in.weight", SD_W_CONV, 4, nc, true, &t, NULL, NULL));
        assert_int_equal(t.dtype, loads[k]);
        const int64_t nb[1] = {16};
        TU_OK(sd_weights_get(&ws, "conv_in.bias", SD_W_F32, 1, nb, true, &t, NULL, NULL));
        assert_int_equal(t.dtype, RB_F32);
        sd_weights_close(&ws);
        TU_OK(sd_weights_init_source(&ws, &f->src, lookup, (void *)text, "text", be, &o, NULL));
        const int64_t ne[2] = {16, 49408};
        TU_OK(sd_weights_get(&ws, "text_model.embeddings.token_embedding.weight", SD_W_EMB, 2, ne, true, &t, NULL,
                             NULL));
        assert_int_equal(t.dtype, loads[k]);
        sd_weights_close(&ws);
    }
    assert_int_equal(f->src.refs, 1); /* every weights' reference was dropped */
    rb_backend_destroy(be);
    sd_gguf_unref(f);
}

/* Relative L2 error bounds of a fixture UNet call against diffusers' f32
 * output, per type. Measured (worst of three calls): q8_0 3.1e-3 (sd15),
 * 4.0e-3 (sd21v), 5.3e-3 (sdxl), 2.7e-3 (sd15-inpaint); q4_0 2.2e-2, 3.4e-2,
 * 5.5e-2, 2.1e-2; q4_K 6.5e-4, 4.7e-4, 5.9e-4, 5.9e-4 (every row of these
 * widths is shorter than a 256-element block: f16, the fallback). Expected
 * orders: q4_0 rounds a weight to 16 levels of its 32-block's range, a
 * relative error of about 2.2 / 8 / sqrt(12) = 8% for Gaussian weights,
 * q8_0 to 255 levels (0.5%), and q8_0 weights also mean q8_0 activations
 * (another ~0.6% at each product's input); only part of the layers can take
 * the blocks here (rows of 16 or 40 fall back to f16), and errors of many
 * layers partly average out. The bounds are about twice the measured worst. */
static const struct { rb_dtype t; double bound; } k_bound[] = {
    {RB_Q8_0, 1e-2}, {RB_Q4_0, 1e-1}, {RB_Q4_K, 1.5e-3},
};

static void test_fixture_unets(void **state) {
    (void)state;
    static const char *const pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t p = 0; p < sizeof pipes / sizeof pipes[0]; p++) {
        rb_st_set *ref = ref_open(pipes[p], "denoiser_call.safetensors");
        for (size_t k = 0; k < sizeof k_bound / sizeof k_bound[0]; k++) {
            char path[512];
            convert_pipe(path, sizeof path, g_tmp, pipes[p], k_bound[k].t);
            sd_gguf_model m = load_gguf(path, be, NULL, SD_GGUF_UNET);
            double worst = 0.0;
            for (int j = 0; j < 3; j++) {
                int64_t n;
                float *o = denoiser_call(m.unet, be, ref, j, &n);
                char name[32];
                FMT(name, "call%d.out", j);
                const double e = rel_l2(o, ref_f32(ref, name, NULL), n);
                worst = e > worst ? e : worst;
                free(o);
            }
            printf("  %-12s %-5s UNet: rel L2 error %.3g (bound %.3g), %.2f MB of weights\n", pipes[p],
                   rb_dtype_name(k_bound[k].t), worst, k_bound[k].bound, (double)rb_unet_weight_bytes(m.unet) / 1e6);
            if (!(worst <= k_bound[k].bound))
                fail_msg("%s %s: error %.3g", pipes[p], rb_dtype_name(k_bound[k].t), worst);
            sd_gguf_model_free(&m);
            remove(path);
        }
        rb_st_close(ref);
    }
    rb_backend_destroy(be);
}

/* ---- a wide random UNet ---- */

typedef struct st_writer {
    char *json;
    size_t jn, jcap;
    float *data;
    size_t dn, dcap;
    tu_rng rng;
} st_writer;

static void sw_add(st_writer *w, const char *name, int nd, const int64_t *shape, float scale, float mean) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    while (w->dn + (size_t)n > w->dcap) w->data = realloc(w->data, (w->dcap = 2 * w->dcap + (size_t)n) * sizeof(float));
    while (w->jn + 512 > w->jcap) w->json = realloc(w->json, w->jcap = 2 * w->jcap + 4096);
    assert_non_null(w->data);
    assert_non_null(w->json);
    for (int64_t i = 0; i < n; i++) w->data[w->dn + (size_t)i] = mean + scale * tu_rng_normal(&w->rng);
    w->jn += (size_t)snprintf(w->json + w->jn, w->jcap - w->jn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                              w->jn > 1 ? "," : "", name);
    for (int d = 0; d < nd; d++)
        w->jn += (size_t)snprintf(w->json + w->jn, w->jcap - w->jn, "%s%lld", d ? "," : "", (long long)shape[d]);
    w->jn += (size_t)snprintf(w->json + w->jn, w->jcap - w->jn, "],\"data_offsets\":[%zu,%zu]}", w->dn * 4,
                              (w->dn + (size_t)n) * 4);
    w->dn += (size_t)n;
}

static void sw_linear(st_writer *w, const char *p, const char *part, int64_t in, int64_t out, bool bias) {
    char n[256];
    const int64_t s[2] = {out, in}, b[1] = {out};
    FMT(n, "%s%s.weight", p, part);
    sw_add(w, n, 2, s, 1.0f / sqrtf((float)in), 0.0f);
    if (!bias) return;
    FMT(n, "%s%s.bias", p, part);
    sw_add(w, n, 1, b, 0.05f, 0.0f);
}

static void sw_conv(st_writer *w, const char *p, int64_t cin, int64_t cout, int64_t k) {
    char n[256];
    const int64_t s[4] = {cout, cin, k, k}, b[1] = {cout};
    FMT(n, "%s.weight", p);
    sw_add(w, n, 4, s, 1.0f / sqrtf((float)(cin * k * k)), 0.0f);
    FMT(n, "%s.bias", p);
    sw_add(w, n, 1, b, 0.05f, 0.0f);
}

static void sw_norm(st_writer *w, const char *p, int64_t c) {
    char n[256];
    const int64_t s[1] = {c};
    FMT(n, "%s.weight", p);
    sw_add(w, n, 1, s, 0.1f, 1.0f);
    FMT(n, "%s.bias", p);
    sw_add(w, n, 1, s, 0.1f, 0.0f);
}

static void sw_resnet(st_writer *w, const char *p, int64_t cin, int64_t cout, int64_t temb) {
    char n[256];
    FMT(n, "%s.norm1", p);
    sw_norm(w, n, cin);
    FMT(n, "%s.conv1", p);
    sw_conv(w, n, cin, cout, 3);
    sw_linear(w, p, ".time_emb_proj", temb, cout, true);
    FMT(n, "%s.norm2", p);
    sw_norm(w, n, cout);
    FMT(n, "%s.conv2", p);
    sw_conv(w, n, cout, cout, 3);
    if (cin != cout) {
        FMT(n, "%s.conv_shortcut", p);
        sw_conv(w, n, cin, cout, 1);
    }
}

/* Transformer2DModel with one block, linear projections. */
static void sw_t2d(st_writer *w, const char *p, int64_t c, int64_t x) {
    char n[256], b[256];
    FMT(n, "%s.norm", p);
    sw_norm(w, n, c);
    sw_linear(w, p, ".proj_in", c, c, true);
    sw_linear(w, p, ".proj_out", c, c, true);
    FMT(b, "%s.transformer_blocks.0", p);
    for (int i = 1; i <= 3; i++) {
        FMT(n, "%s.norm%d", b, i);
        sw_norm(w, n, c);
    }
    static const char *const qkv[3] = {".to_q", ".to_k", ".to_v"};
    for (int a = 1; a <= 2; a++) {
        for (int i = 0; i < 3; i++) {
            FMT(n, "%s.attn%d%s", b, a, qkv[i]);
            sw_linear(w, n, "", a == 2 && i > 0 ? x : c, c, false);
        }
        FMT(n, "%s.attn%d.to_out.0", b, a);
        sw_linear(w, n, "", c, c, true);
    }
    sw_linear(w, b, ".ff.net.0.proj", c, 8 * c, true);
    sw_linear(w, b, ".ff.net.2", 4 * c, c, true);
}

/* One level of 256 channels, a cross-attention down block, a plain up
 * block, no mid block: every linear row a multiple of 256. */
static void write_wide_unet(const char *dir) {
    const int64_t C = 256, T = 256, X = 256;
    st_writer w = {.json = malloc(4096), .jn = 1, .jcap = 4096};
    w.json[0] = '{';
    tu_rng_seed(&w.rng, 7);
    sw_conv(&w, "conv_in", 4, C, 3);
    sw_linear(&w, "time_embedding", ".linear_1", C, T, true);
    sw_linear(&w, "time_embedding", ".linear_2", T, T, true);
    sw_resnet(&w, "down_blocks.0.resnets.0", C, C, T);
    sw_t2d(&w, "down_blocks.0.attentions.0", C, X);
    sw_resnet(&w, "up_blocks.0.resnets.0", 2 * C, C, T);
    sw_resnet(&w, "up_blocks.0.resnets.1", 2 * C, C, T);
    sw_norm(&w, "conv_norm_out", C);
    sw_conv(&w, "conv_out", C, 4, 3);
    w.json[w.jn++] = '}';
    char p[700];
    FMT(p, "%s/unet", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    FMT(p, "%s/unet/config.json", dir);
    static const char cfg[] =
        "{\"_class_name\":\"UNet2DConditionModel\",\"in_channels\":4,\"out_channels\":4,\"block_out_channels\":[256],"
        "\"down_block_types\":[\"CrossAttnDownBlock2D\"],\"up_block_types\":[\"UpBlock2D\"],\"mid_block_type\":null,"
        "\"layers_per_block\":1,\"attention_head_dim\":4,\"cross_attention_dim\":256,\"use_linear_projection\":true,"
        "\"norm_num_groups\":32,\"time_embedding_dim\":256}";
    write_file(p, cfg, sizeof cfg - 1);
    FMT(p, "%s/unet/diffusion_pytorch_model.safetensors", dir);
    const size_t hl = (w.jn + 7) / 8 * 8;
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    const uint64_t h8 = hl;
    fwrite(&h8, 8, 1, fp);
    fwrite(w.json, 1, w.jn, fp);
    for (size_t i = w.jn; i < hl; i++) fputc(' ', fp);
    fwrite(w.data, sizeof(float), w.dn, fp);
    fclose(fp);
    printf("  random UNet: %.1f M parameters\n", (double)w.dn / 1e6);
    free(w.json);
    free(w.data);
}

static float *wide_call(rb_unet *u, rb_backend *be, int64_t *n) {
    tu_rng r;
    tu_rng_seed(&r, 11);
    float x[8 * 8 * 4], ctx[256 * 8];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = tu_rng_normal(&r);
    for (size_t i = 0; i < sizeof ctx / sizeof ctx[0]; i++) ctx[i] = tu_rng_normal(&r);
    *n = 8 * 8 * 4;
    return unet_call(u, be, x, 8, 8, 1, 500.0f, ctx, 8, NULL, NULL);
}

/* Bounds of the wide UNet (relative L2 of the output), about twice the
 * measured values: vs the f32 weights q8_0 1.2e-2, q4_0 0.12, q4_K 0.105,
 * q5_K 5.0e-2, q6_K 2.9e-2 (the weights' rounding: q4_K's 16 levels per
 * 32-element sub-block with 6-bit scales and mins are about as coarse as
 * q4_0, q5_K halves that, q6_K halves it again; q8_0 and the k-quants also
 * round the activations); vs the dequantized weights, where only the
 * activations' rounding to q8_0 (blocks of 32) or q8_K (blocks of 256)
 * inside rb_matmul remains: 7.7e-3 to 1.2e-2, i.e. about 0.6-0.8% at each
 * product's input (the max of a 32- or 256-element Gaussian block is 2.5-3.5
 * standard deviations: a step of max / 127 has an RMS error of 0.6-0.8% of
 * the values) carried through the UNet's chain of products. */
static const struct { rb_dtype t; double vs_f32, vs_deq; } k_wide[] = {
    {RB_Q8_0, 2.5e-2, 2.5e-2}, {RB_Q4_0, 0.25, 2.5e-2}, {RB_Q4_K, 0.2, 2.5e-2},
    {RB_Q5_K, 0.1, 2.5e-2},    {RB_Q6_K, 6e-2, 2.5e-2},
};

static void test_wide_unet_kquants(void **state) {
    (void)state;
    char dir[700], f32_path[700];
    FMT(dir, "%s/wide", g_tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    write_wide_unet(dir);
    convert_into(f32_path, sizeof f32_path, g_tmp, "wide-f32.gguf", dir, RB_F32, NULL);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    sd_gguf_model ref = load_gguf(f32_path, be, NULL, 0);
    int64_t n;
    float *want = wide_call(ref.unet, be, &n);
    rb_unet *folder = NULL;
    char p[800];
    FMT(p, "%s/unet", dir);
    TU_OK(rb_unet_load(p, be, NULL, &folder, NULL));
    float *o = wide_call(folder, be, &n);
    expect_close(o, want, n, 0.0, "wide UNet: f32 gguf vs folder");
    free(o);
    rb_unet_free(folder);
    for (size_t k = 0; k < sizeof k_wide / sizeof k_wide[0]; k++) {
        char path[800], file[64], deq[800];
        FMT(file, "wide-%s.gguf", rb_dtype_name(k_wide[k].t));
        convert_into(path, sizeof path, g_tmp, file, dir, k_wide[k].t, NULL);
        FMT(deq, "%s.f32.gguf", path);
        rb_convert_opts ro = {.type = RB_F32};
        TU_OK(sd_requantize_gguf(path, deq, &ro, NULL, NULL));
        sd_gguf_model mq = load_gguf(path, be, NULL, 0), md = load_gguf(deq, be, NULL, 0);
        float *q = wide_call(mq.unet, be, &n), *d = wide_call(md.unet, be, &n);
        const double e_f32 = rel_l2(q, want, n), e_deq = rel_l2(q, d, n);
        printf("  wide UNet %-5s: rel L2 vs f32 %.3g (bound %.3g), vs its dequantized weights %.3g (bound %.3g), "
               "%.2f MB of weights\n",
               rb_dtype_name(k_wide[k].t), e_f32, k_wide[k].vs_f32, e_deq, k_wide[k].vs_deq,
               (double)rb_unet_weight_bytes(mq.unet) / 1e6);
        assert_true(e_f32 <= k_wide[k].vs_f32);
        assert_true(e_deq <= k_wide[k].vs_deq);
        assert_true(e_deq > 0.0); /* the weights really went through a quantized product */
        assert_true(rb_unet_weight_bytes(mq.unet) < rb_unet_weight_bytes(md.unet));
        /* with f16 activations (rb_sd_load_opts.act_dtype): the quantized products take f16 inputs */
        const rb_sd_load_opts h = {.act_dtype = RB_F16};
        sd_gguf_model mh = load_gguf(path, be, &h, 0);
        float *qh = wide_call(mh.unet, be, &n);
        const double e_h = rel_l2(qh, d, n);
        printf("  wide UNet %-5s with f16 activations: rel L2 vs its dequantized weights %.3g (bound %.3g)\n",
               rb_dtype_name(k_wide[k].t), e_h, 2 * k_wide[k].vs_deq);
        assert_true(e_h <= 2 * k_wide[k].vs_deq);
        free(qh);
        sd_gguf_model_free(&mh);
        free(q);
        free(d);
        sd_gguf_model_free(&mq);
        sd_gguf_model_free(&md);
        remove(path);
        remove(deq);
    }
    free(want);
    sd_gguf_model_free(&ref);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binding_dtypes),
        cmocka_unit_test(test_fixture_unets),
        cmocka_unit_test(test_wide_unet_kquants),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
