/* The 16-channel AutoencoderKL of SD3 (latent_channels 16, no quant_conv /
 * post_quant_conv, scaling_factor 1.5305 and shift_factor 0.0609 in its
 * config) against diffusers (tests/data/sd3/refs/sd3/vae.safetensors, f32
 * from the stored f16 weights): decode of a square and a non-square latent,
 * encode's posterior mean and log-variance; the config's factors as read.
 * Runs on the backend in RBEE_TEST_BACKEND (default cpu). */
#include "sd_nets_ref.h"

#define REL_TOL 1e-5

static rb_backend *backend(void) {
    const char *spec = getenv("RBEE_TEST_BACKEND");
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(spec && *spec ? spec : "cpu", NULL, &be, &err) != RB_OK) fail_msg("backend: %s", err.msg);
    return be;
}

static rb_vae *load(rb_backend *be) {
    char p[1024];
    rb_vae *v = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_load(tu_data(p, sizeof p, "sd3/pipelines/sd3/vae"), be, NULL, &v, &err) != RB_OK)
        fail_msg("load: %s", err.msg);
    return v;
}

static rb_st_set *refs(void) {
    char p[1024];
    rb_st_set *s = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_st_open(tu_data(p, sizeof p, "sd3/refs/sd3/vae.safetensors"), &s, &err) != RB_OK) fail_msg("%s", err.msg);
    return s;
}

static void decode_case(rb_vae *v, rb_backend *be, rb_st_set *r, const char *key, int64_t w, int64_t h) {
    char in_name[64], out_name[64];
    snprintf(in_name, sizeof in_name, "%s.in", key);
    snprintf(out_name, sizeof out_name, "%s.out", key);
    int64_t nz, ni;
    const float *z = ref_f32(r, in_name, &nz), *ref = ref_f32(r, out_name, &ni);
    assert_int_equal(nz, w * h * 16);
    assert_int_equal(ni, w * 8 * h * 8 * 3);
    rb_tensor lt = dev_tensor(be, w, h, 16, 1, z), img = dev_tensor(be, w * 8, h * 8, 3, 1, NULL);
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_decode(v, &lt, &img, &err) != RB_OK) fail_msg("%s", err.msg);
    float *got = dev_read(&img);
    expect_close(got, ref, ni, REL_TOL * max_abs(ref, ni), key);
    free(got);
    rb_tensor_free(&lt);
    rb_tensor_free(&img);
}

static void test_config(void **state) {
    (void)state;
    rb_backend *be = backend();
    rb_vae *v = load(be);
    const rb_vae_config *c = rb_vae_get_config(v);
    assert_int_equal(c->latent_channels, 16);
    assert_false(c->use_quant_conv);
    assert_false(c->use_post_quant_conv);
    assert_true(c->has_shift_factor);
    assert_true(c->scaling_factor == 1.5305f);
    assert_true(c->shift_factor == 0.0609f);
    assert_int_equal(rb_vae_scale(v), 8);
    rb_vae_free(v);
    rb_backend_destroy(be);
}

static void test_decode(void **state) {
    (void)state;
    rb_backend *be = backend();
    rb_vae *v = load(be);
    rb_st_set *r = refs();
    decode_case(v, be, r, "decode", 8, 8);
    decode_case(v, be, r, "decode_nonsquare", 12, 8);
    rb_st_close(r);
    rb_vae_free(v);
    rb_backend_destroy(be);
}

static void test_encode(void **state) {
    (void)state;
    rb_backend *be = backend();
    rb_vae *v = load(be);
    rb_st_set *r = refs();
    int64_t ni, nm, nl;
    const float *x = ref_f32(r, "encode.in", &ni), *mref = ref_f32(r, "encode.mean", &nm);
    const float *lref = ref_f32(r, "encode.logvar", &nl);
    assert_int_equal(ni, 64 * 64 * 3);
    assert_int_equal(nm, 8 * 8 * 16);
    rb_tensor img = dev_tensor(be, 64, 64, 3, 1, x), mean = dev_tensor(be, 8, 8, 16, 1, NULL);
    rb_tensor logvar = dev_tensor(be, 8, 8, 16, 1, NULL);
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_encode(v, &img, &mean, &logvar, &err) != RB_OK) fail_msg("%s", err.msg);
    float *m = dev_read(&mean), *l = dev_read(&logvar);
    expect_close(m, mref, nm, REL_TOL * max_abs(mref, nm), "encode mean");
    expect_close(l, lref, nl, REL_TOL * max_abs(lref, nl), "encode logvar");
    free(m);
    free(l);
    rb_tensor_free(&img);
    rb_tensor_free(&mean);
    rb_tensor_free(&logvar);
    rb_st_close(r);
    rb_vae_free(v);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
