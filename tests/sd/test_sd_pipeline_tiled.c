/* Tiled VAE decoding (rb_sd_vae_decode_tiled) on the fixture VAE:
 *  - against an independent re-implementation of the documented algorithm
 *    (diffusers' AutoencoderKL.tiled_decode with the step T - floor(T x
 *    overlap), which is diffusers' own for its T = 64, overlap 0.25): tiles
 *    decoded with rb_vae_decode on views of one device tensor, blended in
 *    double in place in diffusers' order, cropped and concatenated; equal to
 *    1e-6 for even and uneven edge tiles, several tile sizes and overlaps;
 *  - against the untiled decode of the same latents (256 x 256 pixels, 9
 *    or 4 tiles). Tiling is an approximation, not a rounding difference:
 *    each tile's GroupNorm statistics and its mid-block self-attention see
 *    that tile only (the fixture's random VAE is very sensitive to both:
 *    errors are tens of percent here, where a trained VAE's are a few
 *    levels of 255). So the checks are the method's properties rather than
 *    a rounding bound: the result is far closer to the untiled decode than
 *    unrelated content (the image against itself shifted: < 1/2 of that
 *    difference), blending the overlaps is closer than the same grid with
 *    hard seams (overall and next to the seams), larger tiles are closer
 *    than smaller ones, and a tile as large as the image is the untiled
 *    decode bit for bit;
 *  - rb_sd_generate with tiling on decodes through it. */
#include "sd_pipeline_ref.h"

#include "sd/sd_pipeline_internal.h"

typedef struct tctx {
    rb_backend *be;
    char dir[256];
    rb_sd_model *m;
    rb_vae *v;
} tctx;

static int setup(void **state) {
    tctx *c = calloc(1, sizeof *c);
    assert_non_null(c);
    TU_OK(rb_backend_create("cpu", NULL, &c->be, NULL));
    pipeline_dir(c->dir, sizeof c->dir, "sd15");
    c->m = load_model(c->be, c->dir, NULL);
    c->v = rb_sd_model_vae(c->m);
    *state = c;
    return 0;
}

static int teardown(void **state) {
    tctx *c = *state;
    rb_sd_model_free(c->m);
    tu_tmpdir_remove(c->dir);
    rb_backend_destroy(c->be);
    free(c);
    return 0;
}

typedef struct dtile {
    double *px; /* 3 x th x tw */
    int64_t th, tw;
} dtile;

/* diffusers' tiled_decode, literally: every tile decoded, then blended in
 * place (blend_v with the tile above, blend_h with the tile to the left),
 * cropped to row_limit, rows concatenated. */
static double *reference_tiled(rb_backend *be, rb_vae *v, const float *lat, int64_t h, int64_t w, int T, float ov) {
    const int64_t S = 8, overlap = (int64_t)((float)T * ov), step = T - overlap, blend = overlap * S, keep = step * S;
    const int64_t nr = (h + step - 1) / step, nc = (w + step - 1) / step, H = h * S, W = w * S;
    rb_tensor z;
    const int64_t zne[4] = {w, h, 4, 1};
    TU_OK(rb_tensor_alloc(be, RB_F32, 4, zne, &z));
    TU_OK(rb_tensor_set(&z, lat, sizeof(float) * (size_t)(w * h * 4)));
    dtile *tiles = calloc((size_t)(nr * nc), sizeof *tiles);
    assert_non_null(tiles);
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
            const int64_t th = (i * step + T <= h ? T : h - i * step), tw = (j * step + T <= w ? T : w - j * step);
            rb_tensor view, img;
            TU_OK(rb_tensor_slice(&z, 1, i * step, th, &view));
            rb_tensor v2;
            TU_OK(rb_tensor_slice(&view, 0, j * step, tw, &v2));
            const int64_t ine[4] = {tw * S, th * S, 3, 1};
            TU_OK(rb_tensor_alloc(be, RB_F32, 4, ine, &img));
            TU_OK(rb_vae_decode(v, &v2, &img, NULL));
            const size_t n = (size_t)(3 * th * S * tw * S);
            float *f = malloc(n * sizeof(float));
            assert_non_null(f);
            TU_OK(rb_tensor_get(&img, f, n * sizeof(float)));
            dtile *t = &tiles[i * nc + j];
            t->th = th * S;
            t->tw = tw * S;
            t->px = malloc(n * sizeof(double));
            assert_non_null(t->px);
            for (size_t k = 0; k < n; k++) t->px[k] = f[k];
            free(f);
            rb_tensor_free(&img);
        }
    double *out = calloc((size_t)(3 * H * W), sizeof(double));
    assert_non_null(out);
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
            dtile *b = &tiles[i * nc + j];
            if (i > 0) {
                const dtile *a = &tiles[(i - 1) * nc + j];
                const int64_t e = a->th < b->th ? (a->th < blend ? a->th : blend) : (b->th < blend ? b->th : blend);
                for (int64_t y = 0; y < e; y++)
                    for (int64_t ch = 0; ch < 3; ch++)
                        for (int64_t x = 0; x < b->tw; x++)
                            b->px[(ch * b->th + y) * b->tw + x] =
                                a->px[(ch * a->th + a->th - e + y) * a->tw + x] * (1.0 - (double)y / e) +
                                b->px[(ch * b->th + y) * b->tw + x] * ((double)y / e);
            }
            if (j > 0) {
                const dtile *a = &tiles[i * nc + j - 1];
                const int64_t e = a->tw < b->tw ? (a->tw < blend ? a->tw : blend) : (b->tw < blend ? b->tw : blend);
                for (int64_t x = 0; x < e; x++)
                    for (int64_t ch = 0; ch < 3; ch++)
                        for (int64_t y = 0; y < b->th; y++)
                            b->px[(ch * b->th + y) * b->tw + x] =
                                a->px[(ch * a->th + y) * a->tw + a->tw - e + x] * (1.0 - (double)x / e) +
                                b->px[(ch * b->th + y) * b->tw + x] * ((double)x / e);
            }
            for (int64_t ch = 0; ch < 3; ch++)
                for (int64_t y = 0; y < (b->th < keep ? b->th : keep); y++)
                    for (int64_t x = 0; x < (b->tw < keep ? b->tw : keep); x++)
                        out[(ch * H + i * keep + y) * W + j * keep + x] = b->px[(ch * b->th + y) * b->tw + x];
        }
    for (int64_t k = 0; k < nr * nc; k++) free(tiles[k].px);
    free(tiles);
    rb_tensor_free(&z);
    return out;
}

static float *random_latents(int64_t h, int64_t w, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    float *z = malloc(sizeof(float) * (size_t)(4 * h * w));
    assert_non_null(z);
    for (int64_t i = 0; i < 4 * h * w; i++) z[i] = tu_rng_normal(&r);
    return z;
}

static void test_against_reference(void **state) {
    tctx *c = *state;
    const int64_t h = 40, w = 36; /* uneven edge tiles */
    float *z = random_latents(h, w, 1);
    const size_t n = (size_t)(3 * h * 8 * w * 8);
    float *got = malloc(n * sizeof(float));
    assert_non_null(got);
    static const struct { int tile; float ov; } k[] = {{16, 0.25f}, {13, 0.3f}, {10, 0.0f}, {24, 0.5f}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        TU_OK(rb_sd_vae_decode_tiled(c->be, c->v, z, h, w, k[i].tile, k[i].ov, got, NULL));
        double *ref = reference_tiled(c->be, c->v, z, h, w, k[i].tile, k[i].ov);
        double e = 0.0;
        for (size_t j = 0; j < n; j++) e = fmax(e, fabs(got[j] - ref[j]));
        printf("  tile %2d, overlap %.2f: max |diff| %.2e vs diffusers' algorithm in double\n", k[i].tile,
               (double)k[i].ov, e);
        assert_true(e <= 1e-6);
        free(ref);
    }
    free(got);
    free(z);
}

/* mean |a - b| over the image, and over the pixels within 2 latent pixels of a seam (multiples of step). */
static void tile_error(const float *a, const float *b, int64_t H, int64_t W, int64_t step, double *mean, double *seam) {
    double s = 0.0, ss = 0.0;
    size_t ns = 0;
    for (int64_t ch = 0; ch < 3; ch++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                const size_t i = (size_t)((ch * H + y) * W + x);
                const double d = fabs((double)a[i] - (double)b[i]);
                s += d;
                const int64_t ly = y / 8, lx = x / 8;
                const bool near = (ly > 0 && (ly % step < 2 || ly % step >= step - 2)) ||
                                  (lx > 0 && (lx % step < 2 || lx % step >= step - 2));
                if (near) {
                    ss += d;
                    ns++;
                }
            }
    *mean = s / (double)(3 * H * W);
    *seam = ns ? ss / (double)ns : 0.0;
}

static void test_against_untiled(void **state) {
    tctx *c = *state;
    const int64_t h = 32, w = 32, H = 256, W = 256;
    float *z = random_latents(h, w, 2);
    const size_t n = (size_t)(3 * H * W);
    float *full = malloc(n * sizeof(float)), *t = malloc(n * sizeof(float));
    assert_non_null(full);
    assert_non_null(t);
    TU_OK(sd_vae_decode_host(c->be, c->v, z, h, w, full, NULL));
    double scale = 0.0;
    for (size_t i = 0; i < n; i++) scale += fabs(full[i]);
    scale /= (double)n;
    /* unrelated content: the image against itself shifted by 12 latent pixels */
    double unrelated = 0.0;
    for (int64_t ch = 0; ch < 3; ch++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W - 96; x++)
                unrelated += fabs(full[(ch * H + y) * W + x] - full[(ch * H + y) * W + x + 96]);
    unrelated /= (double)(3 * H * (W - 96));
    double m16, s16, m0, s0, m24, s24;
    TU_OK(rb_sd_vae_decode_tiled(c->be, c->v, z, h, w, 16, 0.25f, t, NULL)); /* 3 x 3 tiles, step 12 */
    tile_error(t, full, H, W, 12, &m16, &s16);
    TU_OK(rb_sd_vae_decode_tiled(c->be, c->v, z, h, w, 12, 0.0f, t, NULL)); /* the same grid without overlap */
    tile_error(t, full, H, W, 12, &m0, &s0);
    TU_OK(rb_sd_vae_decode_tiled(c->be, c->v, z, h, w, 24, 0.25f, t, NULL)); /* 2 x 2 larger tiles, step 18 */
    tile_error(t, full, H, W, 18, &m24, &s24);
    printf("  256x256 vs untiled (mean |x| %.3f; unrelated content differs by %.3f):\n"
           "    9 tiles of 16, overlap 0.25: mean |diff| %.4f, near seams %.4f\n"
           "    9 tiles of 12, no overlap:   mean |diff| %.4f, near seams %.4f\n"
           "    4 tiles of 24, overlap 0.25: mean |diff| %.4f, near seams %.4f\n",
           scale, unrelated, m16, s16, m0, s0, m24, s24);
    /* tiles see less context (GroupNorm statistics and the mid-block
     * attention over one tile): an approximation, far closer than unrelated
     * content; blending the overlaps beats hard seams; larger tiles are closer */
    assert_true(m16 < 0.5 * unrelated);
    assert_true(m16 < m0 && s16 < s0);
    assert_true(m24 < m16);
    /* a tile as large as the image: the untiled decode */
    TU_OK(rb_sd_vae_decode_tiled(c->be, c->v, z, h, w, 32, 0.25f, t, NULL));
    assert_memory_equal(t, full, n * sizeof(float));
    free(full);
    free(t);
    free(z);
}

static void test_bad_arguments(void **state) {
    tctx *c = *state;
    float z[4 * 8 * 8] = {0}, out[3 * 64 * 64];
    rb_error err;
    assert_int_equal(rb_sd_vae_decode_tiled(NULL, c->v, z, 8, 8, 8, 0.25f, out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_vae_decode_tiled(c->be, c->v, z, 8, 8, 2, 0.25f, out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_vae_decode_tiled(c->be, c->v, z, 8, 8, 8, 0.75f, out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_vae_decode_tiled(c->be, c->v, z, 0, 8, 8, 0.25f, out, &err), RB_E_INVALID);
    assert_int_equal(rb_sd_vae_decode_tiled(c->be, c->v, z, 8, 8, 8, NAN, out, &err), RB_E_INVALID);
    printf("  %s\n", err.msg);
}

/* rb_sd_generate with tiling on: its pixels = the tiled decode of its latents. */
static void test_generate_tiled(void **state) {
    tctx *c = *state;
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = "a photograph of an astronaut riding a horse, highly detailed";
    p.width = 96;
    p.height = 64;
    p.steps = 2;
    p.vae_tiling = RB_SD_TILING_ON;
    p.vae_tile = 8;
    rb_sd_output o, u;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &o, NULL));
    const size_t nl = 4 * 8 * 12, np = 3 * 64 * 96;
    float z[4 * 8 * 12], raw[3 * 64 * 96], px[3 * 64 * 96];
    for (size_t i = 0; i < nl; i++) z[i] = o.latents[i] / 0.18215f;
    TU_OK(rb_sd_vae_decode_tiled(c->be, c->v, z, 8, 12, 8, 0.25f, raw, NULL));
    sd_postprocess(raw, 64, 96, px, NULL);
    assert_memory_equal(px, o.pixels, np * sizeof(float));
    /* AUTO at this size: untiled, a different image */
    p.vae_tiling = RB_SD_TILING_AUTO;
    TU_OK(rb_sd_generate(c->m, &p, NULL, &u, NULL));
    assert_memory_equal(u.latents, o.latents, nl * sizeof(float));
    const double d = max_abs_d(u.pixels, o.pixels, np);
    printf("  generate, 2x2 tiles of 8 latents vs untiled: max |diff| %.3f\n", d);
    assert_true(d > 0.0);
    rb_sd_output_free(&o);
    rb_sd_output_free(&u);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_against_untiled),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_generate_tiled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
