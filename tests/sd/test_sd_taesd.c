/* The TAESD decoder (rb_taesd_*) against tests/data/sd/taesd (written by
 * gen_taesd_refs.py: random-weight decoders evaluated in float64 from their
 * float32 weights): the published structure (stages 3-3-3-1, 4 latent
 * channels) on a non-square batch of two, beyond the tanh clamp's knee,
 * from the original file and from the same weights in diffusers'
 * AutoencoderTiny layout (bit-identical results); another layout read from
 * the tensors (16 latent channels, stages 1-2); and the errors: a missing
 * file, a missing block tensor, a file that is no TAESD, bad shapes. Runs on
 * the backend in RBEE_TEST_BACKEND (default cpu; the GPU machine runs it on
 * cuda:0 and rocm:0). */
#include "sd_nets_ref.h"

#define TOL 2e-5

static rb_backend *backend(void) {
    const char *spec = getenv("RBEE_TEST_BACKEND");
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(spec && *spec ? spec : "cpu", NULL, &be, &err) != RB_OK) fail_msg("backend: %s", err.msg);
    return be;
}

static rb_taesd *load(rb_backend *be, const char *rel) {
    char p[1024];
    rb_taesd *t = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_taesd_load(tu_data(p, sizeof p, rel), be, NULL, &t, &err) != RB_OK) fail_msg("load %s: %s", rel, err.msg);
    return t;
}

/* Decodes reference latents [w, h, c, B]; returns the host image. */
static float *decode(rb_taesd *t, rb_backend *be, const float *z, int64_t w, int64_t h, int64_t c, int64_t B) {
    const int s = rb_taesd_scale(t);
    rb_tensor lt = dev_tensor(be, w, h, c, B, z), img = dev_tensor(be, w * s, h * s, 3, B, NULL);
    rb_error err;
    rb_error_clear(&err);
    if (rb_taesd_decode(t, &lt, &img, &err) != RB_OK) fail_msg("%s", err.msg);
    float *o = dev_read(&img);
    rb_tensor_free(&lt);
    rb_tensor_free(&img);
    return o;
}

static rb_st_set *refs(void) {
    char p[1024];
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(tu_data(p, sizeof p, "sd/taesd/refs.safetensors"), &s, &err) != RB_OK) fail_msg("%s", err.msg);
    return s;
}

static void test_decode_published_layout(void **state) {
    (void)state;
    rb_backend *be = backend();
    rb_st_set *r = refs();
    int64_t nz, ni;
    const float *z = ref_f32(r, "a_latents", &nz), *ref = ref_f32(r, "a_image", &ni);
    assert_int_equal(nz, 2 * 4 * 5 * 7);
    assert_int_equal(ni, 2 * 3 * 40 * 56);
    rb_taesd *orig = load(be, "sd/taesd/taesd_decoder.safetensors");
    assert_int_equal(rb_taesd_latent_channels(orig), 4);
    assert_int_equal(rb_taesd_scale(orig), 8);
    float *a = decode(orig, be, z, 7, 5, 4, 2);
    expect_close(a, ref, ni, TOL, "original layout, 2 x 4 x 5 x 7 -> 2 x 3 x 40 x 56");
    rb_taesd *dif = load(be, "sd/taesd/tiny_ae"); /* the folder: diffusion_pytorch_model.safetensors */
    float *b = decode(dif, be, z, 7, 5, 4, 2);
    assert_memory_equal(a, b, sizeof(float) * (size_t)ni);
    /* one image of the batch alone gives the first half */
    float *c = decode(orig, be, z, 7, 5, 4, 1);
    assert_memory_equal(a, c, sizeof(float) * (size_t)(ni / 2));
    free(a);
    free(b);
    free(c);
    rb_taesd_free(orig);
    rb_taesd_free(dif);
    rb_st_close(r);
    rb_backend_destroy(be);
}

static void test_decode_other_layout(void **state) {
    (void)state;
    rb_backend *be = backend();
    rb_st_set *r = refs();
    int64_t ni;
    const float *z = ref_f32(r, "b_latents", NULL), *ref = ref_f32(r, "b_image", &ni);
    rb_taesd *t = load(be, "sd/taesd/taesd16_decoder.safetensors");
    assert_int_equal(rb_taesd_latent_channels(t), 16);
    assert_int_equal(rb_taesd_scale(t), 2);
    float *a = decode(t, be, z, 4, 3, 16, 1);
    expect_close(a, ref, ni, TOL, "16 latent channels, stages 1-2");
    free(a);
    rb_taesd_free(t);
    rb_st_close(r);
    rb_backend_destroy(be);
}

static void expect_load_error(rb_backend *be, const char *path, rb_status want, const char *needle) {
    rb_taesd *t = (rb_taesd *)1;
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(rb_taesd_load(path, be, NULL, &t, &err), want);
    assert_null(t);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_errors(void **state) {
    (void)state;
    rb_backend *be = backend();
    char dir[256], p[1024], src[1024];
    assert_int_equal(tu_tmpdir_make(dir, sizeof dir, "rbee-taesd-"), 0);
    snprintf(p, sizeof p, "%s/none.safetensors", dir);
    expect_load_error(be, p, RB_E_NOT_FOUND, "none.safetensors");
    /* a block's middle convolution missing: named */
    snprintf(p, sizeof p, "%s/drop.safetensors", dir);
    st_rewrite(tu_data(src, sizeof src, "sd/taesd/taesd_decoder.safetensors"), p,
               &(st_xform){.drop = "9.conv.2.weight"});
    expect_load_error(be, p, RB_E_FORMAT, "9.conv.2.weight");
    /* not a TAESD at all */
    expect_load_error(be, tu_data(src, sizeof src, "sd/taesd/refs.safetensors"), RB_E_FORMAT, "first convolution");
    tu_tmpdir_remove(dir);
    /* bad shapes at decode */
    rb_taesd *t = load(be, "sd/taesd/taesd_decoder.safetensors");
    rb_tensor z3 = dev_tensor(be, 4, 4, 3, 1, NULL), z4 = dev_tensor(be, 4, 4, 4, 1, NULL);
    rb_tensor img = dev_tensor(be, 32, 32, 3, 1, NULL), small = dev_tensor(be, 16, 32, 3, 1, NULL);
    TU_OK(rb_fill(be, &z4, 0.5f));
    rb_error err;
    rb_error_clear(&err);
    assert_int_equal(rb_taesd_decode(t, &z3, &img, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "latents"));
    assert_int_equal(rb_taesd_decode(t, &z4, &small, &err), RB_E_INVALID);
    assert_non_null(strstr(err.msg, "image"));
    assert_int_equal(rb_taesd_decode(t, NULL, &img, &err), RB_E_INVALID);
    TU_OK(rb_taesd_decode(t, &z4, &img, &err));
    rb_tensor_free(&z3);
    rb_tensor_free(&z4);
    rb_tensor_free(&img);
    rb_tensor_free(&small);
    rb_taesd_free(t);
    rb_taesd_free(NULL);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_published_layout),
        cmocka_unit_test(test_decode_other_layout),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
