/* The networks loaded from converted GGUF files against diffusers' float32
 * references: every fixture pipeline (sd15, sd21v v-prediction, sdxl with
 * two encoders, sd15-inpaint's 9-channel UNet) and the sd15 single file
 * (with the sd15 folder's configs) converted to f32 GGUF and loaded through
 * sd_gguf_load give the denoiser calls, the VAE decode and encode and every
 * text encoder's hidden states, last hidden state and pooled / projected
 * output within 1e-5 absolute, as the folders do. Converted to f16 and
 * loaded with f16 weights they give exactly (bit for bit) what the folder
 * gives loaded with f16 weights. Also: loading a subset of the components
 * and asking for one the file lacks. */
#include "test_sd_gguf_util.h"

#define TOL 1e-5

static const char *const k_pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};

/* tokenizer of each text encoder, for the reference ids */
static const char *tok_of(const char *enc) { return strcmp(enc, "text_encoder_2") == 0 ? "tokenizer_2" : "tokenizer"; }

/* Compares every output of model m with the diffusers references of pipe. */
static void check_against_refs(const sd_gguf_model *m, rb_backend *be, const char *pipe, const char *label) {
    char what[160];
    rb_st_set *ref = ref_open(pipe, "denoiser_call.safetensors");
    for (int j = 0; j < 3; j++) {
        int64_t n;
        float *o = denoiser_call(m->unet, be, ref, j, &n);
        char name[32];
        FMT(name, "call%d.out", j);
        FMT(what, "%s %s %s", label, pipe, name);
        expect_close(o, ref_f32(ref, name, NULL), n, TOL, what);
        free(o);
    }
    rb_st_close(ref);
    ref = ref_open(pipe, "vae.safetensors");
    int64_t n;
    float *o = vae_decode_ref(m->vae, be, ref, &n);
    FMT(what, "%s %s vae decode", label, pipe);
    expect_close(o, ref_f32(ref, "decode.out", NULL), n, TOL, what);
    free(o);
    o = vae_encode_ref(m->vae, be, ref, &n);
    FMT(what, "%s %s vae encode mean", label, pipe);
    expect_close(o, ref_f32(ref, "encode.mean", NULL), n, TOL, what);
    free(o);
    rb_st_close(ref);
    ref = ref_open(pipe, "text.safetensors");
    rb_clip_text *enc[2] = {m->text, m->text_2};
    static const char *const names[2] = {"text_encoder", "text_encoder_2"};
    for (int e = 0; e < 2; e++) {
        if (!enc[e]) continue;
        const rb_clip_text_config *c = rb_clip_text_get_config(enc[e]);
        const int64_t per = 77 * c->hidden_size;
        for (int i = 0; i <= c->n_layers + 1; i++) {
            float *pool = NULL;
            const bool last = i == c->n_layers + 1;
            float *h = text_encode(enc[e], be, ref, tok_of(names[e]), last ? -1 : i, last ? &pool : NULL);
            for (int b = 0; b < 2; b++) {
                char rn[160];
                if (last)
                    FMT(rn, "%s.%s.last_hidden_state", b ? "prompt" : "negative", names[e]);
                else
                    FMT(rn, "%s.%s.hidden_states.%d", b ? "prompt" : "negative", names[e], i);
                FMT(what, "%s %s %s", label, pipe, rn);
                expect_close(h + b * per, ref_f32(ref, rn, NULL), per, TOL, what);
                if (last) {
                    const int64_t pd = c->with_projection ? c->projection_dim : c->hidden_size;
                    FMT(rn, "%s.%s.%s", b ? "prompt" : "negative", names[e],
                             c->with_projection ? "text_embeds" : "pooler_output");
                    FMT(what, "%s %s %s", label, pipe, rn);
                    expect_close(pool + b * pd, ref_f32(ref, rn, NULL), pd, TOL, what);
                }
            }
            free(h);
            free(pool);
        }
    }
    rb_st_close(ref);
}

static void test_f32_matches_references(void **state) {
    (void)state;
    char tmp[256], path[512];
    assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "rbee_sdg_"), 0);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    for (size_t i = 0; i < sizeof k_pipes / sizeof k_pipes[0]; i++) {
        convert_pipe(path, sizeof path, tmp, k_pipes[i], RB_F32);
        sd_gguf_model m = load_gguf(path, be, NULL, 0);
        assert_true(m.cfg.exact);
        assert_non_null(m.unet);
        assert_non_null(m.vae);
        assert_non_null(m.text);
        assert_true((m.text_2 != NULL) == (strcmp(k_pipes[i], "sdxl") == 0));
        check_against_refs(&m, be, k_pipes[i], "f32 gguf");
        sd_gguf_model_free(&m);
    }
    rb_backend_destroy(be);
    tu_tmpdir_remove(tmp);
}

/* The sd15 single file (diffusers' own conversion script wrote it) with the
 * folder's configs. */
static void test_single_file(void **state) {
    (void)state;
    char tmp[256], path[512], ck[1024], cfg[1024];
    assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "rbee_sdg_"), 0);
    tu_fixture(ck, sizeof ck, "diffusers/single_file/sd15.safetensors");
    make_pipeline(cfg, sizeof cfg, "sd15");
    convert_into(path, sizeof path, tmp, "single.gguf", ck, RB_F32, cfg);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    sd_gguf_model m = load_gguf(path, be, NULL, 0);
    assert_int_equal(m.cfg.family, SD_FAMILY_SD1);
    check_against_refs(&m, be, "sd15", "single file gguf");
    sd_gguf_model_free(&m);
    rb_backend_destroy(be);
    tu_tmpdir_remove(cfg);
    tu_tmpdir_remove(tmp);
}

static void expect_identical(const float *a, const float *b, int64_t n, const char *what) {
    expect_close(a, b, n, 0.0, what);
}

/* f16 GGUF with f16 weights = the folder with f16 weights, bit for bit
 * (the last entry: the sd15 single file converted with the folder's configs). */
static void test_f16_identical_to_folder(void **state) {
    (void)state;
    static const char *const pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint", "sd15"};
    char tmp[256], path[512], dir[512], comp[700], what[160];
    assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "rbee_sdg_"), 0);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    const rb_sd_load_opts o16 = {.weight_dtype = RB_F16};
    for (size_t i = 0; i < sizeof pipes / sizeof pipes[0]; i++) {
        const char *pipe = pipes[i];
        const bool single = i == sizeof pipes / sizeof pipes[0] - 1;
        make_pipeline(dir, sizeof dir, pipe);
        char file[64], ck[1024];
        FMT(file, "%s-%s-f16.gguf", pipe, single ? "single" : "folder");
        if (single) tu_fixture(ck, sizeof ck, "diffusers/single_file/sd15.safetensors");
        convert_into(path, sizeof path, tmp, file, single ? ck : dir, RB_F16, single ? dir : NULL);
        sd_gguf_model m = load_gguf(path, be, &o16, 0);
        rb_unet *u = NULL;
        rb_vae *v = NULL;
        FMT(comp, "%s/unet", dir);
        TU_OK(rb_unet_load(comp, be, &o16, &u, NULL));
        FMT(comp, "%s/vae", dir);
        TU_OK(rb_vae_load(comp, be, &o16, &v, NULL));
        rb_st_set *ref = ref_open(pipe, "denoiser_call.safetensors");
        int64_t n;
        float *a = denoiser_call(m.unet, be, ref, 0, &n), *b = denoiser_call(u, be, ref, 0, &n);
        FMT(what, "%s%s f16 unet: gguf vs folder", pipe, single ? " single file" : "");
        expect_identical(a, b, n, what);
        free(a);
        free(b);
        rb_st_close(ref);
        ref = ref_open(pipe, "vae.safetensors");
        a = vae_decode_ref(m.vae, be, ref, &n);
        b = vae_decode_ref(v, be, ref, &n);
        FMT(what, "%s f16 vae decode: gguf vs folder", pipe);
        expect_identical(a, b, n, what);
        free(a);
        free(b);
        rb_st_close(ref);
        ref = ref_open(pipe, "text.safetensors");
        rb_clip_text *enc[2] = {m.text, m.text_2};
        static const char *const names[2] = {"text_encoder", "text_encoder_2"};
        for (int e = 0; e < 2; e++) {
            if (!enc[e]) continue;
            rb_clip_text *t = NULL;
            FMT(comp, "%s/%s", dir, names[e]);
            TU_OK(rb_clip_text_load(comp, be, &o16, &t, NULL));
            float *pa = NULL, *pb = NULL;
            a = text_encode(enc[e], be, ref, tok_of(names[e]), -1, &pa);
            b = text_encode(t, be, ref, tok_of(names[e]), -1, &pb);
            const rb_clip_text_config *c = rb_clip_text_get_config(t);
            FMT(what, "%s f16 %s last_hidden_state: gguf vs folder", pipe, names[e]);
            expect_identical(a, b, 2 * 77 * c->hidden_size, what);
            FMT(what, "%s f16 %s pooled: gguf vs folder", pipe, names[e]);
            expect_identical(pa, pb, 2 * (c->with_projection ? c->projection_dim : c->hidden_size), what);
            free(a);
            free(b);
            free(pa);
            free(pb);
            rb_clip_text_free(t);
        }
        rb_st_close(ref);
        rb_unet_free(u);
        rb_vae_free(v);
        sd_gguf_model_free(&m);
        tu_tmpdir_remove(dir);
    }
    rb_backend_destroy(be);
    tu_tmpdir_remove(tmp);
}

/* Components on request; the networks outlive each other and the file in any order. */
static void test_components(void **state) {
    (void)state;
    char tmp[256], path[512];
    assert_int_equal(tu_tmpdir_make(tmp, sizeof tmp, "rbee_sdg_"), 0);
    convert_pipe(path, sizeof path, tmp, "sd15", RB_F32);
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    sd_gguf_model m = load_gguf(path, be, NULL, SD_GGUF_UNET | SD_GGUF_VAE_DECODER);
    assert_non_null(m.unet);
    assert_non_null(m.vae);
    assert_null(m.text);
    assert_true(m.cfg.vae.decoder_only);
    assert_false(m.cfg.has_text);
    rb_st_set *ref = ref_open("sd15", "vae.safetensors");
    int64_t n;
    float *o = vae_decode_ref(m.vae, be, ref, &n);
    expect_close(o, ref_f32(ref, "decode.out", NULL), n, TOL, "sd15 decoder-only vae decode");
    free(o);
    rb_st_close(ref);
    rb_unet *u = m.unet; /* keep the UNet past the rest of the model */
    m.unet = NULL;
    sd_gguf_model_free(&m);
    ref = ref_open("sd15", "denoiser_call.safetensors");
    o = denoiser_call(u, be, ref, 1, &n);
    expect_close(o, ref_f32(ref, "call1.out", NULL), n, TOL, "sd15 unet outliving the model");
    free(o);
    rb_st_close(ref);
    rb_unet_free(u);
    /* a component the file does not have */
    sd_gguf_model none;
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(sd_gguf_load(path, NULL, be, NULL, SD_GGUF_TEXT_2, &none, &err), RB_E_NOT_FOUND);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "text_encoder_2"));
    assert_null(none.unet);
    assert_int_equal(sd_gguf_load(path, NULL, be, NULL, 1u << 9, &none, &err), RB_E_INVALID);
    /* or skipped on request */
    sd_gguf_model some = load_gguf(path, be, NULL, SD_GGUF_TEXT | SD_GGUF_TEXT_2 | SD_GGUF_IF_PRESENT);
    assert_non_null(some.text);
    assert_null(some.text_2);
    assert_null(some.unet);
    assert_true(some.cfg.has_text && !some.cfg.has_text_2 && !some.cfg.has_unet);
    sd_gguf_model_free(&some);
    rb_backend_destroy(be);
    tu_tmpdir_remove(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_matches_references),
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_f16_identical_to_folder),
        cmocka_unit_test(test_components),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
