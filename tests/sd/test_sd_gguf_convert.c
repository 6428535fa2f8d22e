/* `rbee convert` for Stable Diffusion (sd_convert_to_gguf) and SD
 * requantization, checked against independent references:
 *  - pipelines/sd15 converted to f32 GGUF holds exactly the 790 tensors of
 *    single_file/sd15.safetensors (written by diffusers' own conversion
 *    script): same LDM names, shapes and bytes; so does the single file
 *    converted with the folder's configs;
 *  - the UNet and VAE of sd21v and sdxl get the names, shapes and bytes that
 *    diffusers' conversion scripts gave (tests/data/sd/ldm_names.json);
 *  - every tensor of every fixture folder is found again, bit for bit, under
 *    its diffusers name through the GGUF reader's maps (a bijection), SD 2.x
 *    gets its zero placeholder layer, and the rbee.sd.* configs, scheduler
 *    config and pad tokens read back equal to the folder's;
 *  - f16 / bf16 / q8_0 / q4_0 / q4_K files: each tensor's dtype follows the
 *    documented rule (restated here) and its bytes are the reference encoder
 *    of the f32 file's values (rb_quantize_rows: ggml's quantizers, which
 *    the quant tests check bit for bit);
 *  - requantizing an f32 GGUF gives the direct conversion's tensors;
 *  - bad inputs fail with clear errors and leave no output file. */
#include "test_sd_gguf_util.h"

#include <jansson.h>

static const char *const k_pipes[] = {"sd15", "sd21v", "sdxl", "sd15-inpaint"};

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_tmp, sizeof g_tmp, "rbee_sdg_");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_tmp);
}

static const rb_gguf_tensor_info *find(const rb_gguf *g, const char *name) { return rb_gguf_find_tensor(g, name); }

/* Every tensor of the safetensors file is in the GGUF file with the same
 * name, f32, shape and bytes, and the GGUF has no others. */
static void expect_gguf_equals_st(const char *gguf_path, const char *st_path) {
    rb_gguf *g = NULL;
    rb_st_set *s = NULL;
    TU_OK(rb_gguf_open(gguf_path, &g, NULL));
    TU_OK(rb_st_open(st_path, &s, NULL));
    assert_int_equal(rb_gguf_n_tensors(g), rb_st_n_tensors(s));
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        const rb_gguf_tensor_info *x = find(g, t->name);
        if (!x) fail_msg("%s is not in %s", t->name, gguf_path);
        assert_int_equal(x->dtype, RB_F32);
        assert_int_equal(x->n_dims, t->n_dims);
        for (int d = 0; d < t->n_dims; d++) assert_int_equal(x->ne[d], t->ne[d]);
        assert_int_equal(x->nbytes, t->nbytes);
        if (memcmp(x->data, t->data, t->nbytes) != 0) fail_msg("%s differs", t->name);
    }
    rb_st_close(s);
    rb_gguf_close(g);
}

static void test_sd15_equals_single_file(void **state) {
    (void)state;
    char path[512], ck[1024], dir[512];
    tu_fixture(ck, sizeof ck, "diffusers/single_file/sd15.safetensors");
    expect_gguf_equals_st(convert_pipe(path, sizeof path, g_tmp, "sd15", RB_F32), ck);
    make_pipeline(dir, sizeof dir, "sd15");
    expect_gguf_equals_st(convert_into(path, sizeof path, g_tmp, "single.gguf", ck, RB_F32, dir), ck);
    /* without configs: the tiny widths do not fit the published SD 1.x text encoder's 64-wide heads */
    rb_convert_opts o = {.type = RB_F32};
    rb_error err;
    rb_error_clear(&err);
    FMT(path, "%s/none.gguf", g_tmp);
    assert_int_equal(sd_convert_to_gguf(ck, path, &o, NULL, NULL, &err), RB_E_UNSUPPORTED);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "needs its config"));
    assert_int_not_equal(access(path, F_OK), 0);
    /* configs of another family */
    char d21[512];
    make_pipeline(d21, sizeof d21, "sd21v");
    assert_int_equal(sd_convert_to_gguf(ck, path, &o, d21, NULL, &err), RB_E_FORMAT);
    printf("  %s\n", err.msg);
    tu_tmpdir_remove(d21);
    tu_tmpdir_remove(dir);
}

/* A fixture tensor "component/name" (following the fixtures' stubs). */
static const rb_st_tensor *fixture_tensor(const char *pipe, const char *ref, rb_st_set **opened, int *n_opened) {
    const char *slash = strchr(ref, '/');
    assert_non_null(slash);
    char rel[256], path[1024];
    const bool unet_vae = !strncmp(ref, "unet/", 5) || !strncmp(ref, "vae/", 4);
    FMT(rel, "diffusers/pipelines/%s/%.*s/%s", pipe, (int)(slash - ref), ref,
        unet_vae ? "diffusion_pytorch_model.safetensors" : "model.safetensors");
    tu_fixture(path, sizeof path, rel);
    char *real = resolve_weights(path);
    rb_st_set *s = NULL;
    TU_OK(rb_st_open(real, &s, NULL));
    free(real);
    opened[(*n_opened)++] = s;
    const rb_st_tensor *t = rb_st_find(s, slash + 1);
    if (!t) fail_msg("%s: no such fixture tensor", ref);
    return t;
}

static void test_ldm_names_of_diffusers_scripts(void **state) {
    (void)state;
    char path[1024];
    size_t len = 0;
    char *text = tu_read_file(tu_data(path, sizeof path, "sd/ldm_names.json"), &len);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    assert_non_null(root);
    static const char *const pipes[] = {"sd21v", "sdxl"};
    for (int p = 0; p < 2; p++) {
        json_t *list = json_object_get(json_object_get(root, "pipelines"), pipes[p]);
        assert_non_null(list);
        char gpath[512];
        convert_pipe(gpath, sizeof gpath, g_tmp, pipes[p], RB_F32);
        rb_gguf *g = NULL;
        TU_OK(rb_gguf_open(gpath, &g, NULL));
        size_t i, n_json = 0;
        json_t *e;
        json_array_foreach(list, i, e) {
            const char *name = json_string_value(json_array_get(e, 0)), *op = json_string_value(json_array_get(e, 1));
            if (strncmp(name, "model.diffusion_model.", 22) != 0 && strncmp(name, "first_stage_model.", 18) != 0)
                continue;
            n_json++;
            assert_string_equal(op, "copy");
            const rb_gguf_tensor_info *x = find(g, name);
            if (!x) fail_msg("%s: %s is missing", pipes[p], name);
            rb_st_set *opened[2];
            int n_opened = 0;
            const rb_st_tensor *src = fixture_tensor(pipes[p], json_string_value(json_array_get(e, 2)), opened,
                                                     &n_opened);
            assert_int_equal(x->nbytes, src->nbytes);
            if (memcmp(x->data, src->data, src->nbytes) != 0) fail_msg("%s: %s differs", pipes[p], name);
            if (x->n_dims != src->n_dims) { /* the VAE attention as 1x1 convolutions */
                assert_non_null(strstr(name, ".attn_1."));
                assert_int_equal(x->n_dims, 4);
                assert_int_equal(x->ne[0] * x->ne[1], 1);
            }
            for (int k = 0; k < n_opened; k++) rb_st_close(opened[k]);
        }
        size_t n_gguf = 0;
        for (int64_t k = 0; k < rb_gguf_n_tensors(g); k++) {
            const rb_gguf_tensor_info *x = rb_gguf_tensor_at(g, k);
            n_gguf += (x->name.len > 22 && !memcmp(x->name.ptr, "model.diffusion_model.", 22)) ||
                      (x->name.len > 18 && !memcmp(x->name.ptr, "first_stage_model.", 18));
        }
        printf("  %s: %zu UNet and VAE tensors as diffusers' scripts name them\n", pipes[p], n_json);
        assert_int_equal(n_gguf, n_json);
        rb_gguf_close(g);
    }
    json_decref(root);
}

static char *read_text(const char *pipe, const char *rel) {
    char r[256], p[1024];
    FMT(r, "diffusers/pipelines/%s/%s", pipe, rel);
    size_t n;
    return tu_read_file(tu_fixture(p, sizeof p, r), &n);
}

/* Every float tensor of a folder component is found under its name, bit for bit; returns how many. */
static size_t check_map(const sd_name_map *m, const char *pipe, const char *comp, const char *weights) {
    char rel[256], path[1024];
    FMT(rel, "diffusers/pipelines/%s/%s/%s", pipe, comp, weights);
    char *real = resolve_weights(tu_fixture(path, sizeof path, rel));
    rb_st_set *s = NULL;
    TU_OK(rb_st_open(real, &s, NULL));
    free(real);
    size_t n = 0;
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        if (t->dtype != RB_F32) continue;
        char name[320];
        if (!strcmp(comp, "text_encoder") || !strcmp(comp, "text_encoder_2"))
            FMT(name, "%s%s", strncmp(t->name, "text_model.", 11) && strncmp(t->name, "text_projection", 15) ?
                                  "text_model." : "", t->name);
        else
            FMT(name, "%s", t->name);
        const rb_st_tensor *x = sd_name_map_find(m, name);
        if (!x) fail_msg("%s/%s: %s is not mapped", pipe, comp, name);
        assert_int_equal(x->dtype, RB_F32);
        assert_int_equal(x->nbytes, t->nbytes);
        if (memcmp(x->data, t->data, t->nbytes) != 0) fail_msg("%s/%s: %s differs", pipe, comp, name);
        n++;
    }
    rb_st_close(s);
    assert_int_equal(m->n, n);
    return n;
}

static void test_maps_and_configs_round_trip(void **state) {
    (void)state;
    for (size_t p = 0; p < sizeof k_pipes / sizeof k_pipes[0]; p++) {
        const char *pipe = k_pipes[p];
        char path[512], cfg[1024], r[256];
        convert_pipe(path, sizeof path, g_tmp, pipe, RB_F32);
        sd_gguf *f = NULL;
        rb_error err;
        rb_error_clear(&err);
        if (sd_gguf_open(path, &f, &err) != RB_OK) fail_msg("%s", err.msg);
        const sd_gguf_configs *c = &f->cfg;
        assert_true(c->exact);
        assert_false(f->unet_only);
        const bool xl = !strcmp(pipe, "sdxl"), sd2 = !strcmp(pipe, "sd21v");
        assert_int_equal(c->family, xl ? SD_FAMILY_SDXL : sd2 ? SD_FAMILY_SD2 : SD_FAMILY_SD1);
        assert_string_equal(f->arch, xl ? "sdxl" : "sd1");
        size_t n = check_map(sd_gguf_component_map(&f->ldm, c->family, SD_GGUF_UNET), pipe, "unet",
                             "diffusion_pytorch_model.safetensors");
        n += check_map(sd_gguf_component_map(&f->ldm, c->family, SD_GGUF_VAE), pipe, "vae",
                       "diffusion_pytorch_model.safetensors");
        n += check_map(sd_gguf_component_map(&f->ldm, c->family, SD_GGUF_TEXT), pipe, "text_encoder",
                       "model.safetensors");
        if (xl)
            n += check_map(sd_gguf_component_map(&f->ldm, c->family, SD_GGUF_TEXT_2), pipe, "text_encoder_2",
                           "model.safetensors");
        else
            assert_null(sd_gguf_component_map(&f->ldm, c->family, SD_GGUF_TEXT_2));
        printf("  %s: %zu tensors mapped back bit for bit\n", pipe, n);
        /* configs */
        rb_unet_config u;
        rb_vae_config v;
        rb_clip_text_config t;
        FMT(r, "diffusers/pipelines/%s/unet/config.json", pipe);
        TU_OK(rb_unet_config_load(tu_fixture(cfg, sizeof cfg, r), &u, NULL));
        assert_memory_equal(&u, &c->unet, sizeof u);
        FMT(r, "diffusers/pipelines/%s/vae/config.json", pipe);
        TU_OK(rb_vae_config_load(tu_fixture(cfg, sizeof cfg, r), &v, NULL));
        assert_memory_equal(&v, &c->vae, sizeof v);
        FMT(r, "diffusers/pipelines/%s/text_encoder/config.json", pipe);
        TU_OK(rb_clip_text_config_load(tu_fixture(cfg, sizeof cfg, r), &t, NULL));
        assert_memory_equal(&t, &c->text, sizeof t);
        assert_int_equal(c->has_text_2, xl);
        if (xl) {
            tu_fixture(cfg, sizeof cfg, "diffusers/pipelines/sdxl/text_encoder_2/config.json");
            TU_OK(rb_clip_text_config_load(cfg, &t, NULL));
            assert_memory_equal(&t, &c->text_2, sizeof t);
        }
        char *sched = read_text(pipe, "scheduler/scheduler_config.json");
        assert_non_null(c->scheduler_json);
        assert_string_equal(c->scheduler_json, sched);
        free(sched);
        assert_string_equal(c->pad_token[0], sd2 ? "!" : "<|endoftext|>");
        if (xl) assert_string_equal(c->pad_token[1], "!");
        else assert_null(c->pad_token[1]);
        /* SD 2.x: OpenCLIP's last layer as zeros after the model's 3 layers */
        const rb_gguf_tensor_info *z =
            rb_gguf_find_tensor(f->g, "cond_stage_model.model.transformer.resblocks.3.attn.in_proj_weight");
        assert_true((z != NULL) == sd2);
        if (z) {
            assert_int_equal(z->ne[0], 24);
            assert_int_equal(z->ne[1], 72);
            for (size_t k = 0; k < z->nbytes; k++) assert_int_equal(((const uint8_t *)z->data)[k], 0);
            assert_null(rb_gguf_find_tensor(f->g, "cond_stage_model.model.transformer.resblocks.4.ln_1.weight"));
        }
        sd_gguf_unref(f);
    }
}

/* The dtype rule of sd_convert.h, restated. */
static rb_dtype expected_dtype(const char *name, int n_dims, int64_t ne0, rb_dtype t) {
    const bool fl = t == RB_F32 || t == RB_F16 || t == RB_BF16;
    if (n_dims == 1 || strstr(name, "position")) return RB_F32;
    if (strstr(name, "token_embedding")) return fl ? t : RB_F16;
    if (n_dims == 4) return t == RB_F32 || t == RB_BF16 ? t : RB_F16;
    return ne0 % rb_dtype_info((int)t)->block_size == 0 ? t : RB_F16;
}

static void test_dtypes_and_encodings(void **state) {
    (void)state;
    static const rb_dtype types[] = {RB_F16, RB_BF16, RB_Q8_0, RB_Q4_0, RB_Q4_K};
    static const char *const pipes[] = {"sd15", "sdxl"};
    for (int p = 0; p < 2; p++) {
        char f32_path[512];
        convert_pipe(f32_path, sizeof f32_path, g_tmp, pipes[p], RB_F32);
        rb_gguf *ref = NULL;
        TU_OK(rb_gguf_open(f32_path, &ref, NULL));
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            char path[512];
            convert_pipe(path, sizeof path, g_tmp, pipes[p], types[k]);
            rb_gguf *g = NULL;
            TU_OK(rb_gguf_open(path, &g, NULL));
            uint32_t ft = 0;
            TU_OK(rb_gguf_get_u32(g, "general.file_type", &ft));
            assert_int_equal(ft, rb_convert_file_type(types[k]));
            assert_int_equal(rb_gguf_n_tensors(g), rb_gguf_n_tensors(ref));
            int64_t n_in_type = 0;
            for (int64_t i = 0; i < rb_gguf_n_tensors(g); i++) {
                const rb_gguf_tensor_info *x = rb_gguf_tensor_at(g, i), *r = rb_gguf_tensor_at(ref, i);
                char name[320];
                FMT(name, "%.*s", (int)x->name.len, x->name.ptr);
                assert_int_equal(x->name.len, r->name.len);
                assert_memory_equal(x->name.ptr, r->name.ptr, x->name.len);
                assert_memory_equal(x->ne, r->ne, sizeof x->ne);
                const rb_dtype want = expected_dtype(name, x->n_dims, x->ne[0], types[k]);
                if (x->dtype != want)
                    fail_msg("%s as %s: %s is %s, expected %s", pipes[p], rb_dtype_name(types[k]), name,
                             rb_dtype_name(x->dtype), rb_dtype_name(want));
                n_in_type += x->dtype == types[k] && x->n_dims == 2;
                const int64_t ne0 = r->ne[0], rows = (int64_t)(r->nbytes / 4) / ne0;
                uint8_t *enc = malloc(x->nbytes + 1);
                assert_non_null(enc);
                if (want == RB_F32) memcpy(enc, r->data, r->nbytes);
                else TU_OK(rb_quantize_rows(want, r->data, enc, rows, ne0));
                if (memcmp(enc, x->data, x->nbytes) != 0) fail_msg("%s: %s is not the reference encoding", path, name);
                free(enc);
            }
            printf("  %s as %s: %lld linear weights in %s, the rest by the rule\n", pipes[p], rb_dtype_name(types[k]),
                   (long long)n_in_type, rb_dtype_name(types[k]));
            if (types[k] != RB_Q4_K) assert_true(n_in_type > 0); /* the fixtures' rows are below 256 */
            rb_gguf_close(g);
        }
        rb_gguf_close(ref);
    }
}

static void test_requantize(void **state) {
    (void)state;
    char f32_path[512], q8_path[512], out[512];
    convert_pipe(f32_path, sizeof f32_path, g_tmp, "sdxl", RB_F32);
    convert_pipe(q8_path, sizeof q8_path, g_tmp, "sdxl", RB_Q8_0);
    assert_true(sd_convert_is_sd_gguf(f32_path));
    FMT(out, "%s/requant.gguf", g_tmp);
    rb_convert_opts o = {.type = RB_Q8_0};
    rb_convert_stats st;
    rb_error err;
    rb_error_clear(&err);
    if (sd_requantize_gguf(f32_path, out, &o, &st, &err) != RB_OK) fail_msg("%s", err.msg);
    expect_same_tensors(out, q8_path);
    rb_gguf *g = NULL;
    TU_OK(rb_gguf_open(out, &g, NULL));
    uint32_t ft = 0;
    TU_OK(rb_gguf_get_u32(g, "general.file_type", &ft));
    assert_int_equal(ft, 7);
    char *fam = NULL;
    TU_OK(rb_gguf_get_str(g, "rbee.sd.family", &fam));
    assert_string_equal(fam, "sdxl");
    free(fam);
    rb_gguf_close(g);
    /* q8_0 -> q8_0: every tensor copied as it is */
    FMT(out, "%s/requant2.gguf", g_tmp);
    if (sd_requantize_gguf(q8_path, out, &o, &st, &err) != RB_OK) fail_msg("%s", err.msg);
    expect_same_tensors(out, q8_path);
    /* not an SD file */
    assert_false(sd_convert_is_sd_gguf(tu_fixture(out, sizeof out, "diffusers/single_file/sd15.safetensors")));
}

static void expect_fail(const char *in, const char *cfg, rb_dtype t, rb_status code, const char *needle) {
    char out[512];
    FMT(out, "%s/fail.gguf", g_tmp);
    rb_convert_opts o = {.type = t};
    rb_error err;
    rb_error_clear(&err);
    rb_status s = sd_convert_to_gguf(in, out, &o, cfg, NULL, &err);
    printf("  %s\n", err.msg);
    if (s != code || !strstr(err.msg, needle))
        fail_msg("expected %s with \"%s\", got %s: %s", rb_status_str(code), needle, rb_status_str(s), err.msg);
    assert_int_not_equal(access(out, F_OK), 0);
    char part[600];
    FMT(part, "%s.part", out);
    assert_int_not_equal(access(part, F_OK), 0);
}

static void drop_tensor(const char *name, char *new_name, size_t cap, int64_t *shape, int *nd) {
    (void)shape;
    (void)nd;
    if (!strcmp(name, "mid_block.attentions.0.proj_in.weight")) snprintf(new_name, cap, "mid_block.extra.weight");
}

static void test_convert_errors(void **state) {
    (void)state;
    char dir[512], p[1024];
    make_pipeline(dir, sizeof dir, "sd15");
    expect_fail(dir, NULL, RB_Q8_1, RB_E_INVALID, "cannot write weights as q8_1");
    expect_fail(dir, dir, RB_F16, RB_E_INVALID, "--config is for single-file checkpoints");
    expect_fail(g_tmp, NULL, RB_F16, RB_E_NOT_FOUND, "not a diffusers pipeline folder");
    expect_fail("/nonexistent/model.safetensors", NULL, RB_F16, RB_E_NOT_FOUND, "model.safetensors");
    /* a UNet tensor the config does not have */
    FMT(p, "%s/unet/diffusion_pytorch_model.safetensors", dir);
    char *real = resolve_weights(p);
    remove(p);
    st_xform x = {.edit = drop_tensor};
    st_rewrite(real, p, &x);
    free(real);
    expect_fail(dir, NULL, RB_F16, RB_E_FORMAT, "mid_block.extra.weight");
    /* a bad scheduler config */
    FMT(p, "%s/scheduler/scheduler_config.json", dir);
    write_file(p, "{\"beta_start\": \"x\"}", 19);
    expect_fail(dir, NULL, RB_F16, RB_E_FORMAT, "beta_start");
    tu_tmpdir_remove(dir);
    /* an output that cannot be written */
    make_pipeline(dir, sizeof dir, "sd15");
    rb_convert_opts o = {.type = RB_F16};
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(sd_convert_to_gguf(dir, "/nonexistent/out.gguf", &o, NULL, NULL, &err), RB_E_IO);
    printf("  %s\n", err.msg);
    tu_tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd15_equals_single_file),
        cmocka_unit_test(test_ldm_names_of_diffusers_scripts),
        cmocka_unit_test(test_maps_and_configs_round_trip),
        cmocka_unit_test(test_dtypes_and_encodings),
        cmocka_unit_test(test_requantize),
        cmocka_unit_test(test_convert_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
