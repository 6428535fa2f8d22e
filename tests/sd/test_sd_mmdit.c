/* The MMDiT (rb_mmdit_*) against diffusers' SD3Transformer2DModel outputs in
 * tests/data/sd3/refs (f32 from the stored f16 weights): SD3-medium's layout
 * (tests/data/sd3/pipelines/sd3) and SD3.5-medium's (qk RMS norm, a dual
 * attention block), each at t = 1000 and 437.5 on a batch [uncond, cond],
 * and a non-square latent (the 64x96 run's first model call: a 6x4 patch
 * grid cropped off-centre from the 12x12 position table); then the errors:
 * unsupported or out-of-range config fields, a missing tensor, a wrong
 * shape, inputs of the wrong shape or a latent larger than the position
 * table. Also f16 / bf16 activations against the f32 reference (0.5% / 3%). Runs on the backend in RBEE_TEST_BACKEND (default cpu). */
#include "sd_nets_ref.h"

#include "rbee/sd_mmdit.h"

#define REL_TOL 1e-5

static rb_backend *backend(void) {
    const char *spec = getenv("RBEE_TEST_BACKEND");
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(spec && *spec ? spec : "cpu", NULL, &be, &err) != RB_OK) fail_msg("backend: %s", err.msg);
    return be;
}

static const char *pipe_dir(char *buf, size_t cap, const char *pipe) {
    char rel[256];
    snprintf(rel, sizeof rel, "sd3/pipelines/%s/transformer", pipe);
    return tu_data(buf, cap, rel);
}

static rb_mmdit *load(rb_backend *be, const char *dir) {
    rb_mmdit *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_mmdit_load(dir, be, NULL, &m, &err) != RB_OK) fail_msg("load %s: %s", dir, err.msg);
    return m;
}

static rb_st_set *open_ref(const char *pipe, const char *file) {
    char p[1024], rel[256];
    snprintf(rel, sizeof rel, "sd3/refs/%s/%s", pipe, file);
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(tu_data(p, sizeof p, rel), &s, &err) != RB_OK) fail_msg("%s", err.msg);
    return s;
}

/* One model call on reference inputs (torch NCHW / [B, T, C] memory is the
 * ggml [W, H, C, B] / [C, T, B] layout); returns the host output. */
static float *call(rb_mmdit *m, rb_backend *be, const float *x, int64_t W, int64_t H, const float *ctx, int64_t T,
                   const float *pooled, const float *t, rb_status want, rb_error *err) {
    const rb_mmdit_config *c = rb_mmdit_get_config(m);
    rb_tensor xs = dev_tensor(be, W, H, c->in_channels, 2, x), cs = dev_tensor(be, c->joint_attention_dim, T, 2, 1, ctx);
    rb_tensor ps = dev_tensor(be, c->pooled_projection_dim, 2, 1, 1, pooled);
    rb_tensor o = dev_tensor(be, W, H, c->out_channels, 2, NULL);
    rb_mmdit_inputs in = {.sample = &xs, .context = &cs, .pooled = &ps, .timesteps = t};
    rb_error_clear(err);
    rb_status s = rb_mmdit_forward(m, &in, &o, err);
    if (s != want) fail_msg("forward: status %d, wanted %d: %s", s, want, err->msg);
    float *out = s == RB_OK ? dev_read(&o) : NULL;
    rb_tensor_free(&xs);
    rb_tensor_free(&cs);
    rb_tensor_free(&ps);
    rb_tensor_free(&o);
    return out;
}

static void expect_rel(const float *got, const float *ref, int64_t n, const char *what) {
    expect_close(got, ref, n, REL_TOL * max_abs(ref, n), what);
}

static void denoiser_calls(const char *pipe) {
    rb_backend *be = backend();
    char d[1024];
    rb_mmdit *m = load(be, pipe_dir(d, sizeof d, pipe));
    rb_st_set *r = open_ref(pipe, "denoiser_call.safetensors");
    int64_t nx, nc, np, nt, no;
    const float *x = ref_f32(r, "hidden_states", &nx), *ctx = ref_f32(r, "encoder_hidden_states", &nc);
    const float *pooled = ref_f32(r, "pooled_projections", &np);
    assert_int_equal(nx, 2 * 16 * 8 * 8);
    assert_int_equal(nc, 2 * 101 * 32);
    assert_int_equal(np, 2 * 20);
    rb_error err;
    for (int k = 0; k < 2; k++) {
        char name[64], what[96];
        snprintf(name, sizeof name, "call%d.timestep", k);
        const float *t = ref_f32(r, name, &nt);
        assert_int_equal(nt, 2);
        snprintf(name, sizeof name, "call%d.out", k);
        const float *ref = ref_f32(r, name, &no);
        assert_int_equal(no, nx);
        float *got = call(m, be, x, 8, 8, ctx, 101, pooled, t, RB_OK, &err);
        snprintf(what, sizeof what, "%s t=%g", pipe, (double)t[0]);
        expect_rel(got, ref, no, what);
        free(got);
    }
    rb_st_close(r);
    rb_mmdit_free(m);
    rb_backend_destroy(be);
}

static void test_sd3(void **state) {
    (void)state;
    denoiser_calls("sd3");
}

static void test_sd35(void **state) {
    (void)state;
    denoiser_calls("sd35");
}

/* The 64x96 run's first call: latents 8 high, 12 wide (4 rows of 6 patches). */
static void test_nonsquare(void **state) {
    (void)state;
    rb_backend *be = backend();
    char d[1024];
    rb_mmdit *m = load(be, pipe_dir(d, sizeof d, "sd3"));
    rb_st_set *r = open_ref("sd3", "txt2img_flow_euler_64x96.safetensors");
    int64_t nx, nc, np, nt, no;
    const float *x = ref_f32(r, "step0.model_in", &nx), *ctx = ref_f32(r, "cond.encoder_hidden_states", &nc);
    const float *pooled = ref_f32(r, "cond.pooled_projections", &np), *t = ref_f32(r, "step0.timestep", &nt);
    const float *ref = ref_f32(r, "step0.model_out", &no);
    assert_int_equal(nx, 2 * 16 * 8 * 12);
    assert_int_equal(no, nx);
    assert_int_equal(nt, 2);
    rb_error err;
    float *got = call(m, be, x, 12, 8, ctx, nc / (2 * 32), pooled, t, RB_OK, &err);
    expect_rel(got, ref, no, "sd3 64x96 step 0");
    free(got);
    rb_st_close(r);
    rb_mmdit_free(m);
    rb_backend_destroy(be);
}

/* Half-precision activations (products and norms still accumulate in f32):
 * the same call within a few per cent of the f32 reference. */
static void test_half_activations(void **state) {
    (void)state;
    rb_backend *be = backend();
    char d[1024];
    rb_mmdit *m = load(be, pipe_dir(d, sizeof d, "sd35"));
    rb_st_set *r = open_ref("sd35", "denoiser_call.safetensors");
    int64_t n;
    const float *x = ref_f32(r, "hidden_states", NULL), *ctx = ref_f32(r, "encoder_hidden_states", NULL);
    const float *pooled = ref_f32(r, "pooled_projections", NULL), *t = ref_f32(r, "call1.timestep", NULL);
    const float *ref = ref_f32(r, "call1.out", &n);
    const rb_dtype dts[2] = {RB_F16, RB_BF16};
    const double tol[2] = {5e-3, 3e-2};
    rb_error err;
    for (int i = 0; i < 2; i++) {
        TU_OK(rb_mmdit_set_act_dtype(m, dts[i], &err));
        float *got = call(m, be, x, 8, 8, ctx, 101, pooled, t, RB_OK, &err);
        char what[64];
        snprintf(what, sizeof what, "sd35 t=437.5, %s activations", rb_dtype_name(dts[i]));
        expect_close(got, ref, n, tol[i] * max_abs(ref, n), what);
        free(got);
    }
    assert_int_equal(rb_mmdit_set_act_dtype(m, RB_Q8_0, &err), RB_E_UNSUPPORTED);
    rb_st_close(r);
    rb_mmdit_free(m);
    rb_backend_destroy(be);
}

static void test_bad_inputs(void **state) {
    (void)state;
    rb_backend *be = backend();
    char d[1024];
    rb_mmdit *m = load(be, pipe_dir(d, sizeof d, "sd3"));
    static float x[2 * 16 * 26 * 26], ctx[2 * 5 * 32], pooled[40];
    const float t[2] = {500.0f, 500.0f}, tn[2] = {NAN, 1.0f};
    rb_error err;
    call(m, be, x, 26, 26, ctx, 5, pooled, t, RB_E_INVALID, &err); /* 13x13 patches > 12x12 */
    assert_non_null(strstr(err.msg, "position table"));
    call(m, be, x, 9, 8, ctx, 5, pooled, t, RB_E_INVALID, &err); /* odd width */
    assert_non_null(strstr(err.msg, "multiples of the patch size"));
    call(m, be, x, 8, 8, ctx, 5, pooled, tn, RB_E_INVALID, &err);
    assert_non_null(strstr(err.msg, "not finite"));
    /* a context of the wrong width */
    rb_tensor xs = dev_tensor(be, 8, 8, 16, 2, x), cs = dev_tensor(be, 31, 5, 2, 1, ctx);
    rb_tensor ps = dev_tensor(be, 20, 2, 1, 1, pooled), o = dev_tensor(be, 8, 8, 16, 2, NULL);
    rb_mmdit_inputs in = {.sample = &xs, .context = &cs, .pooled = &ps, .timesteps = t};
    assert_int_equal(rb_mmdit_forward(m, &in, &o, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "context"));
    in.context = NULL;
    assert_int_equal(rb_mmdit_forward(m, &in, &o, &err), RB_E_INVALID);
    assert_int_equal(rb_mmdit_forward(NULL, &in, &o, &err), RB_E_INVALID);
    rb_tensor_free(&xs);
    rb_tensor_free(&cs);
    rb_tensor_free(&ps);
    rb_tensor_free(&o);
    rb_mmdit_free(m);
    rb_backend_destroy(be);
}

/* ---- modified copies of the transformer folder ---- */

static const char *st_name(rb_dtype t) { return t == RB_F16 ? "F16" : t == RB_BF16 ? "BF16" : "F32"; }

/* Copies the sd3 transformer's weights into dir, leaving out `drop` and
 * giving `reshape` the torch-order shape shp (same element count). */
static void write_weights(const char *dir, const char *drop, const char *reshape, const int64_t *shp, int nd_new) {
    char src[1024], dst[1024];
    snprintf(dst, sizeof dst, "%s/diffusion_pytorch_model.safetensors", dir);
    pipe_dir(src, sizeof src, "sd3");
    strncat(src, "/diffusion_pytorch_model.safetensors", sizeof src - strlen(src) - 1);
    rb_st_set *s = NULL;
    TU_OK(rb_st_open(src, &s, NULL));
    json_t *hdr = json_object();
    size_t total = 0;
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) total += rb_st_tensor_at(s, i)->nbytes;
    char *data = malloc(total + 1);
    assert_non_null(data);
    size_t off = 0;
    for (int64_t i = 0; i < rb_st_n_tensors(s); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(s, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        memcpy(data + off, t->data, t->nbytes);
        json_t *shape = json_array();
        if (reshape && strcmp(t->name, reshape) == 0)
            for (int k = 0; k < nd_new; k++) json_array_append_new(shape, json_integer(shp[k]));
        else
            for (int k = t->n_dims - 1; k >= 0; k--) json_array_append_new(shape, json_integer(t->ne[k]));
        json_t *e = json_object(), *offs = json_array();
        json_object_set_new(e, "dtype", json_string(st_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "data_offsets", offs);
        json_object_set_new(hdr, t->name, e);
        off += t->nbytes;
    }
    char *h = json_dumps(hdr, JSON_COMPACT);
    size_t hl = strlen(h), padded = (hl + 7) & ~(size_t)7;
    FILE *f = fopen(dst, "wb");
    if (!f) fail_msg("cannot write %s", dst);
    uint64_t n8 = padded;
    fwrite(&n8, 8, 1, f);
    fwrite(h, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    fwrite(data, 1, off, f);
    fclose(f);
    free(h);
    free(data);
    json_decref(hdr);
    rb_st_close(s);
}

/* A temporary transformer folder: the sd3 config with `from` replaced by `to` (NULL: unchanged). */
static void make_folder(char *dir, size_t cap, const char *from, const char *to) {
    if (tu_tmpdir_make(dir, cap, "rbee_mmdit_") != 0) fail_msg("cannot make a temporary folder");
    char p[1024], q[1024];
    pipe_dir(p, sizeof p, "sd3");
    strncat(p, "/config.json", sizeof p - strlen(p) - 1);
    size_t n;
    char *c = tu_read_file(p, &n);
    snprintf(q, sizeof q, "%s/config.json", dir);
    if (from) {
        char *at = strstr(c, from);
        if (!at) fail_msg("'%s' not in the config", from);
        char *e = malloc(n + strlen(to) + 1);
        assert_non_null(e);
        snprintf(e, n + strlen(to) + 1, "%.*s%s%s", (int)(at - c), c, to, at + strlen(from));
        write_file(q, e, strlen(e));
        free(e);
    } else {
        write_file(q, c, n);
    }
    free(c);
}

static void expect_load_error(rb_backend *be, const char *dir, rb_status want, const char *needle,
                              const char *needle2) {
    rb_mmdit *m = NULL;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_mmdit_load(dir, be, NULL, &m, &err);
    printf("  load error: %s\n", err.msg);
    assert_int_equal(s, want);
    assert_null(m);
    if (needle) assert_non_null(strstr(err.msg, needle));
    if (needle2) assert_non_null(strstr(err.msg, needle2));
}

static void test_bad_folders(void **state) {
    (void)state;
    rb_backend *be = backend();
    char dir[512];
    const struct { const char *from, *to, *needle; rb_status st; } cfgs[] = {
        {"\"qk_norm\": null", "\"qk_norm\": \"layer_norm\"", "qk_norm", RB_E_UNSUPPORTED},
        {"\"SD3Transformer2DModel\"", "\"FluxTransformer2DModel\"", "_class_name", RB_E_UNSUPPORTED},
        {"\"num_layers\": 2", "\"num_layers\": 0", "num_layers", RB_E_UNSUPPORTED},
        {"\"dual_attention_layers\": []", "\"dual_attention_layers\": [2]", "dual_attention_layers", RB_E_FORMAT},
        {"\"caption_projection_dim\": 32", "\"caption_projection_dim\": 24", "caption_projection_dim", RB_E_UNSUPPORTED},
        {"\"patch_size\": 2", "\"patch_size\": \"2\"", "patch_size", RB_E_FORMAT},
        /* the weights then lack attn2 of block 0 */
        {"\"dual_attention_layers\": []", "\"dual_attention_layers\": [0]", "transformer_blocks.0.norm1.linear.weight",
         RB_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        make_folder(dir, sizeof dir, cfgs[i].from, cfgs[i].to);
        write_weights(dir, NULL, NULL, NULL, 0);
        expect_load_error(be, dir, cfgs[i].st, cfgs[i].needle, NULL);
        tu_tmpdir_remove(dir);
    }
    make_folder(dir, sizeof dir, NULL, NULL);
    write_weights(dir, "transformer_blocks.1.attn.add_v_proj.bias", NULL, NULL, 0);
    expect_load_error(be, dir, RB_E_FORMAT, "transformer_blocks.1.attn.add_v_proj.bias", NULL);
    tu_tmpdir_remove(dir);
    make_folder(dir, sizeof dir, NULL, NULL);
    const int64_t shp[3] = {1, 12, 12 * 32};
    write_weights(dir, NULL, "pos_embed.pos_embed", shp, 3);
    expect_load_error(be, dir, RB_E_FORMAT, "pos_embed.pos_embed", NULL);
    tu_tmpdir_remove(dir);
    make_folder(dir, sizeof dir, NULL, NULL); /* no weights file */
    expect_load_error(be, dir, RB_E_NOT_FOUND, "diffusion_pytorch_model", NULL);
    tu_tmpdir_remove(dir);
    rb_mmdit *m = NULL;
    assert_int_equal(rb_mmdit_load(NULL, be, NULL, &m, NULL), RB_E_INVALID);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd3),         cmocka_unit_test(test_sd35),        cmocka_unit_test(test_nonsquare),
        cmocka_unit_test(test_half_activations), cmocka_unit_test(test_bad_inputs), cmocka_unit_test(test_bad_folders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
