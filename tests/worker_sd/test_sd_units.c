/* Unit tests of the SD worker's pure parts (no model, no HTTP):
 *  - base64 against RFC 4648's test vectors, whitespace, data URLs, every
 *    kind of malformed input, a binary round trip;
 *  - sampler and schedule names: A1111's display names and aliases in any
 *    case, the pre-1.9 "<sampler> <schedule>" names, ours with suffixes,
 *    unknown names refused (never mapped to a neighbour);
 *  - request parsing of the three APIs: defaults, every field, each kind of
 *    bad input named by field (types, ranges, multiples of 8, --max-size,
 *    base64, image bytes, mask and image sizes, cross-field rules), A1111's
 *    refused fields, override_settings and options, OpenAI's size strings
 *    and formats, the engine parameters of each iteration;
 *  - A1111's infotext parser (png-info), against what its
 *    parse_generation_parameters gives for the same texts;
 *  - latent previews against the published latent-to-RGB factors;
 *  - the tiled-decode fallback after running out of memory;
 *  - --sd-version names. */
#include "testutil.h"

#include "rbee/image.h"
#include "rbee/safetensors.h"
#include "worker/wk_base64.h"
#include "worker_sd/sd_a1111.h"
#include "worker_sd/sd_engine.h"
#include "worker_sd/sd_openai.h"
#include "worker_sd/sd_preview.h"
#include "worker_sd/sd_request.h"
#include "worker_sd/sd_samplers.h"
#include "worker_sd/sd_worker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sd_model_limits k_lim = {
    .max_size = 256, .default_width = 64, .default_height = 64, .default_steps = 20, .default_cfg = 7.5f, .vae_scale = 8};

/* ---- base64 ---- */

static void b64_roundtrip(const char *plain, const char *enc) {
    char *e = wk_base64_encode(plain, strlen(plain));
    assert_non_null(e);
    assert_string_equal(e, enc);
    free(e);
    uint8_t *d = NULL;
    size_t n = 0;
    if (!*enc) {
        assert_int_equal(wk_base64_decode(enc, 0, 100, &d, &n, NULL), WK_B64_EMPTY);
        return;
    }
    assert_int_equal(wk_base64_decode(enc, strlen(enc), 100, &d, &n, NULL), WK_B64_OK);
    assert_int_equal(n, strlen(plain));
    assert_memory_equal(d, plain, n);
    free(d);
}

static wk_b64_result dec(const char *s, size_t max, char *out, size_t *bad) {
    uint8_t *d = NULL;
    size_t n = 0;
    wk_b64_result r = wk_base64_decode(s, strlen(s), max, &d, &n, bad);
    if (r == WK_B64_OK) {
        memcpy(out, d, n);
        out[n] = '\0';
        free(d);
    } else {
        assert_null(d);
    }
    return r;
}

static void test_base64(void **state) {
    (void)state;
    /* RFC 4648, section 10 */
    b64_roundtrip("", "");
    b64_roundtrip("f", "Zg==");
    b64_roundtrip("fo", "Zm8=");
    b64_roundtrip("foo", "Zm9v");
    b64_roundtrip("foob", "Zm9vYg==");
    b64_roundtrip("fooba", "Zm9vYmE=");
    b64_roundtrip("foobar", "Zm9vYmFy");
    char out[64];
    size_t bad = 0;
    assert_int_equal(dec("Zm9v\r\nYmFy\n", 100, out, NULL), WK_B64_OK); /* line-wrapped */
    assert_string_equal(out, "foobar");
    assert_int_equal(dec("data:image/png;base64,Zm9vYg==", 100, out, NULL), WK_B64_OK);
    assert_string_equal(out, "foob");
    assert_int_equal(dec("Zm9vYg", 100, out, NULL), WK_B64_OK); /* padding left out */
    assert_string_equal(out, "foob");
    assert_int_equal(dec("Zm9v!mFy", 100, out, &bad), WK_B64_BAD_CHAR);
    assert_int_equal(bad, 4);
    assert_int_equal(dec("Zm9v-_", 100, out, &bad), WK_B64_BAD_CHAR); /* the URL alphabet is not this one */
    assert_int_equal(dec("Zg=a", 100, out, &bad), WK_B64_BAD_PAD);     /* a digit after padding */
    assert_int_equal(dec("Z", 100, out, &bad), WK_B64_BAD_PAD);
    assert_int_equal(dec("Zm9vY", 100, out, &bad), WK_B64_BAD_PAD);
    assert_int_equal(dec("Zg===", 100, out, &bad), WK_B64_BAD_PAD);
    assert_int_equal(dec("Zm8==", 100, out, &bad), WK_B64_BAD_PAD);
    assert_int_equal(dec("====", 100, out, &bad), WK_B64_BAD_PAD);
    assert_int_equal(dec(" \n ", 100, out, &bad), WK_B64_EMPTY);
    assert_int_equal(dec("data:image/png;base64,", 100, out, &bad), WK_B64_EMPTY);
    assert_int_equal(dec("Zm9vYmFy", 5, out, &bad), WK_B64_TOO_LARGE);
    assert_int_equal(dec("Zm9vYmFy", 6, out, &bad), WK_B64_OK);
    /* every byte value, every length mod 3 */
    tu_rng rng;
    tu_rng_seed(&rng, 5);
    for (size_t len = 995; len <= 1000; len++) {
        uint8_t *p = malloc(len);
        assert_non_null(p);
        for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(i < 256 ? i : tu_rng_u64(&rng));
        char *e = wk_base64_encode(p, len);
        assert_int_equal(strlen(e), wk_base64_len(len));
        uint8_t *d = NULL;
        size_t n = 0;
        assert_int_equal(wk_base64_decode(e, strlen(e), len, &d, &n, NULL), WK_B64_OK);
        assert_int_equal(n, len);
        assert_memory_equal(d, p, len);
        free(d);
        free(e);
        free(p);
    }
}

/* ---- sampler names ---- */

static void sampler_is(const char *name, rb_sd_sampler_kind k, rb_sd_schedule s, bool sched_given) {
    rb_sd_sampler_kind gk;
    rb_sd_schedule gs;
    bool given;
    assert_true(sd_sampler_lookup(name, &gk, &gs, &given));
    assert_int_equal(gk, k);
    assert_int_equal(gs, s);
    assert_int_equal(given, sched_given);
}

static void test_sampler_names(void **state) {
    (void)state;
    sampler_is("Euler a", RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("euler A", RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("k_euler_ancestral", RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("Euler", RB_SD_SAMPLER_EULER, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("Heun", RB_SD_SAMPLER_HEUN, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("DPM++ 2M", RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("k_dpmpp_2m", RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("DPM++ 2M Karras", RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_KARRAS, true);
    sampler_is("DPM++ SDE Karras", RB_SD_SAMPLER_DPMPP_SDE, RB_SD_SCHEDULE_KARRAS, true);
    sampler_is("DPM++ 2M Exponential", RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_EXPONENTIAL, true);
    sampler_is("Euler a SGM Uniform", RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_SGM_UNIFORM, true);
    sampler_is("DDIM", RB_SD_SAMPLER_DDIM, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("LCM", RB_SD_SAMPLER_LCM, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("dpmpp_2m_karras", RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_KARRAS, true);
    sampler_is("euler_a", RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, false);
    sampler_is("dpmpp_sde", RB_SD_SAMPLER_DPMPP_SDE, RB_SD_SCHEDULE_DEFAULT, false);
    rb_sd_sampler_kind k;
    rb_sd_schedule s;
    bool g;
    /* samplers the engine does not have are not mapped to a neighbour */
    const char *unknown[] = {"LMS", "DPM2 a", "DPM++ 2M SDE", "DPM++ 2S a", "UniPC", "PLMS", "Restart", "DPM fast",
                             "Euler Polyexponential", "euler_b", "", "DPM++", "Karras"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) assert_false(sd_sampler_lookup(unknown[i], &k, &s, &g));
    assert_false(sd_sampler_lookup(NULL, &k, &s, &g));
    assert_true(sd_schedule_lookup("Automatic", &s) && s == RB_SD_SCHEDULE_DEFAULT);
    assert_true(sd_schedule_lookup("normal", &s) && s == RB_SD_SCHEDULE_DEFAULT);
    assert_true(sd_schedule_lookup("karras", &s) && s == RB_SD_SCHEDULE_KARRAS);
    assert_true(sd_schedule_lookup("SGM Uniform", &s) && s == RB_SD_SCHEDULE_SGM_UNIFORM);
    assert_true(sd_schedule_lookup("simple", &s) && s == RB_SD_SCHEDULE_SIMPLE);
    assert_true(sd_schedule_lookup("exponential", &s) && s == RB_SD_SCHEDULE_EXPONENTIAL);
    assert_false(sd_schedule_lookup("polyexponential", &s));
    assert_false(sd_schedule_lookup("align_your_steps", &s));
    assert_false(sd_schedule_lookup("uniform", &s));
    char buf[400];
    sd_sampler_names(true, buf, sizeof buf);
    assert_string_equal(buf, "DPM++ 2M, DPM++ SDE, Euler a, Euler, Heun, LCM, DDIM");
    sd_sampler_names(false, buf, sizeof buf);
    assert_string_equal(buf, "euler, euler_a, heun, dpmpp_2m, dpmpp_sde, ddim, lcm, flow_euler");
    sd_sampler_a1111_full_name(RB_SD_SAMPLER_DPMPP_2M, RB_SD_SCHEDULE_KARRAS, buf, sizeof buf);
    assert_string_equal(buf, "DPM++ 2M Karras");
    sd_sampler_a1111_full_name(RB_SD_SAMPLER_EULER_A, RB_SD_SCHEDULE_DEFAULT, buf, sizeof buf);
    assert_string_equal(buf, "Euler a");
    /* every listed name maps back to itself */
    json_t *list = sd_a1111_samplers_json();
    assert_int_equal(json_array_size(list), 7);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        const char *name = json_string_value(json_object_get(v, "name"));
        assert_true(sd_sampler_lookup(name, &k, &s, &g));
        assert_string_equal(rb_sd_sampler_a1111_name(k), name);
    }
    json_decref(list);
    list = sd_a1111_schedulers_json();
    json_array_foreach(list, i, v) assert_true(sd_schedule_lookup(json_string_value(json_object_get(v, "label")), &s));
    json_decref(list);
}

/* ---- request parsing ---- */

static json_t *js(const char *text) {
    json_error_t je;
    json_t *o = json_loads(text, JSON_ALLOW_NUL, &je); /* NULs reach the readers only this way */
    if (!o) fail_msg("bad test JSON %s: %s", text, je.text);
    return o;
}

/* The field errors of a request as "field:constraint" joined by spaces. */
static void errs_str(const wk_errors *e, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < e->n; i++) {
        int w = snprintf(buf + n, len - n, "%s%s:%s", i ? " " : "", e->items[i].field, e->items[i].constraint);
        if (w > 0) n += (size_t)w;
    }
}

/* Parses an rbee body; returns the errors as text. */
static void rbee(const char *text, sd_gen_request *r, char *errs, size_t len) {
    json_t *o = js(text);
    wk_errors e = {.n = 0};
    sd_request_init(r, SD_API_RBEE, &k_lim);
    sd_request_from_rbee(o, &k_lim, r, &e);
    json_decref(o);
    errs_str(&e, errs, len);
}

/* A base64 PNG of w x h with c channels (pixel values v). */
static char *png_b64(int w, int h, int c, uint8_t v) {
    rb_image img = {0};
    TU_OK(rb_image_alloc(&img, w, h, c, NULL));
    memset(img.data, v, (size_t)w * (size_t)h * (size_t)c);
    uint8_t *png = NULL;
    size_t n = 0;
    TU_OK(rb_png_encode(&img, NULL, &png, &n, NULL));
    char *b = wk_base64_encode(png, n);
    free(png);
    rb_image_free(&img);
    return b;
}

static void test_rbee_request(void **state) {
    (void)state;
    sd_gen_request r;
    char e[1024];
    rbee("{\"prompt\": \"a cat\"}", &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_string_equal(r.prompt, "a cat");
    assert_null(r.negative_prompt);
    assert_int_equal(r.width, 64);
    assert_int_equal(r.height, 64);
    assert_int_equal(r.steps, 20);
    assert_true(r.cfg_scale == 7.5f);
    assert_false(r.sampler_set);
    assert_int_equal(r.batch, 1);
    assert_int_equal(r.n_iter, 1);
    assert_int_equal(r.preview_every, 5);
    assert_int_equal(r.prompt_mode, RB_SD_PROMPT_TRUNCATE);
    assert_true(r.seed <= UINT32_MAX); /* a random 32-bit seed */
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"negative_prompt\": \"n\", \"width\": 128, \"height\": 96, \"steps\": 30, "
         "\"cfg_scale\": 5, \"sampler\": \"DPM++ 2M Karras\", \"seed\": 42, \"batch_size\": 3, \"clip_skip\": 1, "
         "\"eta\": 0.5, \"rng\": \"cuda\", \"prompt_mode\": \"a1111\", \"preview_every\": 2, "
         "\"operation\": \"txt2img\", \"model\": \"whatever\"}",
         &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_string_equal(r.negative_prompt, "n");
    assert_int_equal(r.width, 128);
    assert_int_equal(r.height, 96);
    assert_int_equal(r.steps, 30);
    assert_true(r.cfg_scale == 5.0f);
    assert_int_equal(r.sampler, RB_SD_SAMPLER_DPMPP_2M);
    assert_true(r.schedule_set && r.schedule == RB_SD_SCHEDULE_KARRAS);
    assert_int_equal(r.seed, 42);
    assert_int_equal(r.batch, 3);
    assert_int_equal(r.clip_skip, 1);
    assert_true(r.eta == 0.5);
    assert_int_equal(r.rng, RB_TORCH_RNG_CUDA);
    assert_int_equal(r.prompt_mode, RB_SD_PROMPT_A1111);
    assert_true(r.emphasis);
    assert_int_equal(r.preview_every, 2);
    /* the engine's parameters of the third run: seed + 2 x batch */
    rb_sd_params p;
    sd_request_params(&r, 2, &p);
    assert_int_equal(p.seed, 42 + 6);
    assert_string_equal(p.sampler, "dpmpp_2m");
    assert_string_equal(p.schedule, "karras");
    assert_int_equal(p.batch, 3);
    assert_int_equal(p.width, 128);
    assert_null(p.init_image);
    sd_request_free(&r);
    /* a separate scheduler field; "Automatic" beside a named schedule keeps it */
    rbee("{\"prompt\": \"p\", \"sampler\": \"euler\", \"scheduler\": \"karras\"}", &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_true(r.schedule_set && r.schedule == RB_SD_SCHEDULE_KARRAS);
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"sampler\": \"DPM++ 2M Karras\", \"scheduler\": \"Automatic\"}", &r, e, sizeof e);
    assert_true(r.schedule_set && r.schedule == RB_SD_SCHEDULE_KARRAS);
    sd_request_free(&r);
    /* every bad field at once, each named */
    rbee("{\"prompt\": 3, \"width\": 60, \"height\": 512, \"steps\": 0, \"cfg_scale\": 31, \"sampler\": \"LMS\", "
         "\"seed\": -2, \"batch_size\": 9, \"clip_skip\": 12, \"rng\": \"mt\", \"prompt_mode\": \"x\", \"colour\": 1}",
         &r, e, sizeof e);
    assert_string_equal(e, "colour:unknown_field prompt:type:string width:multiple_of:8 height:range:8..256 "
                           "steps:range:1..150 cfg_scale:range:0..30 sampler:enum seed:range:-1..9223372036854775807 "
                           "batch_size:range:1..8 clip_skip:range:0..11 rng:enum:cpu,cuda prompt_mode:enum:diffusers,a1111");
    sd_request_free(&r);
    rbee("{}", &r, e, sizeof e);
    assert_string_equal(e, "prompt:required");
    sd_request_free(&r);
    rbee("{\"prompt\": \"a\\u0000b\"}", &r, e, sizeof e);
    assert_string_equal(e, "prompt:no_nul");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"operation\": \"infer\"}", &r, e, sizeof e);
    assert_string_equal(e, "operation:enum");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"strength\": 0.5}", &r, e, sizeof e);
    assert_string_equal(e, "strength:needs:init_image");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"seed\": -1}", &r, e, sizeof e);
    assert_string_equal(e, "");
    sd_request_free(&r);

    /* images: base64 errors, bytes that are no image, sizes */
    char body[8192];
    char *img = png_b64(96, 64, 3, 200), *mask = png_b64(96, 64, 1, 255), *small = png_b64(32, 32, 1, 255),
         *odd = png_b64(20, 20, 3, 9);
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"init_image\": \"%s\", \"mask\": \"%s\", \"strength\": 0.7}", img, mask);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.width, 96); /* the size comes from the image */
    assert_int_equal(r.height, 64);
    assert_int_equal(r.init.channels, 3);
    assert_int_equal(r.mask.channels, 1);
    assert_true(r.strength == 0.7);
    sd_request_params(&r, 0, &p);
    assert_ptr_equal(p.init_image, &r.init);
    assert_ptr_equal(p.mask, &r.mask);
    sd_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"init_image\": \"%s\", \"width\": 64}", img);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "width:equals:init_image");
    sd_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"init_image\": \"%s\", \"mask\": \"%s\"}", img, small);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "mask:equals:init_image");
    sd_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"mask\": \"%s\"}", mask);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "mask:needs:init_image");
    sd_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"init_image\": \"%s\"}", odd);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "init_image:multiple_of:8");
    sd_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"operation\": \"inpaint\", \"init_image\": \"%s\"}", img);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "mask:operation");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"init_image\": \"iVBOR$$\"}", &r, e, sizeof e);
    assert_string_equal(e, "init_image:base64");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"init_image\": \"R0lGODlhAQABAAAAACw=\"}", &r, e, sizeof e); /* a GIF */
    assert_string_equal(e, "init_image:format");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"init_image\": \"iVBORw0KGgoAAAANSUhEUg==\"}", &r, e, sizeof e); /* a cut PNG */
    assert_string_equal(e, "init_image:image");
    sd_request_free(&r);
    rbee("{\"prompt\": \"p\", \"init_image\": 5}", &r, e, sizeof e);
    assert_string_equal(e, "init_image:type:string");
    sd_request_free(&r);
    char *big = png_b64(264, 8, 3, 0); /* wider than --max-size 256 */
    snprintf(body, sizeof body, "{\"prompt\": \"p\", \"init_image\": \"%s\"}", big);
    rbee(body, &r, e, sizeof e);
    assert_string_equal(e, "init_image:max_size");
    sd_request_free(&r);
    free(big);
    free(img);
    free(mask);
    free(small);
    free(odd);
}

static void a1111(const char *text, bool img2img, sd_a1111_options *o, sd_gen_request *r, char *errs, size_t len) {
    json_t *j = js(text);
    wk_errors e = {.n = 0};
    sd_request_init(r, SD_API_A1111, &k_lim);
    sd_a1111_parse(j, img2img, &k_lim, o, "model", r, &e);
    json_decref(j);
    errs_str(&e, errs, len);
}

static void test_a1111_request(void **state) {
    (void)state;
    sd_a1111_options o;
    sd_a1111_options_init(&o);
    sd_gen_request r;
    char e[2048];
    a1111("{}", false, &o, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.width, 256); /* A1111's 512 default, capped by this --max-size */
    sd_request_free(&r);
    a1111("{\"width\": 256, \"height\": 128}", false, &o, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_string_equal(r.prompt, "");
    assert_int_equal(r.steps, 50);
    assert_true(r.cfg_scale == 7.0f);
    assert_int_equal(r.sampler, RB_SD_SAMPLER_EULER);
    assert_false(r.schedule_set);
    assert_int_equal(r.rng, RB_TORCH_RNG_CUDA);
    assert_int_equal(r.clip_skip, 0);
    assert_int_equal(r.prompt_mode, RB_SD_PROMPT_A1111);
    assert_true(r.emphasis);
    assert_int_equal(r.preview_every, 10);
    assert_true(r.send_images);
    sd_request_free(&r);
    /* the fields a client sends with their defaults pass */
    a1111("{\"prompt\": \"p\", \"negative_prompt\": \"\", \"styles\": [], \"seed\": 5, \"subseed\": -1, "
          "\"subseed_strength\": 0, \"seed_resize_from_h\": -1, \"seed_resize_from_w\": -1, \"sampler_name\": null, "
          "\"sampler_index\": \"Euler a\", \"batch_size\": 2, \"n_iter\": 3, \"steps\": 10, \"cfg_scale\": 4.5, "
          "\"width\": 128, \"height\": 64, \"restore_faces\": false, \"tiling\": false, \"do_not_save_samples\": false, "
          "\"do_not_save_grid\": false, \"eta\": null, \"s_min_uncond\": 0, \"s_churn\": 0, \"s_tmax\": null, "
          "\"s_tmin\": 0, \"s_noise\": 1, \"override_settings\": {}, \"override_settings_restore_afterwards\": true, "
          "\"refiner_checkpoint\": null, \"refiner_switch_at\": null, \"disable_extra_networks\": false, "
          "\"firstpass_image\": null, \"comments\": {}, \"enable_hr\": false, \"firstphase_width\": 0, "
          "\"hr_scale\": 2, \"hr_upscaler\": null, \"script_name\": null, \"script_args\": [], \"send_images\": true, "
          "\"save_images\": false, \"alwayson_scripts\": {}, \"infotext\": null}",
          false, &o, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.sampler, RB_SD_SAMPLER_EULER_A);
    assert_int_equal(r.batch, 2);
    assert_int_equal(r.n_iter, 3);
    assert_string_equal(r.negative_prompt, "");
    rb_sd_params p;
    sd_request_params(&r, 1, &p);
    assert_int_equal(p.seed, 7); /* the second run: seed + batch */
    sd_request_free(&r);
    /* the fields that ask for what this worker does not do */
    a1111("{\"styles\": [\"s\"], \"subseed_strength\": 0.5, \"seed_resize_from_h\": 512, \"restore_faces\": true, "
          "\"tiling\": true, \"enable_hr\": true, \"save_images\": true, \"s_churn\": 1, \"s_noise\": 0.9, "
          "\"refiner_checkpoint\": \"r\", \"script_name\": \"x\", \"alwayson_scripts\": {\"a\": {}}, "
          "\"infotext\": \"t\", \"width\": 64, \"height\": 64}",
          false, &o, &r, e, sizeof e);
    assert_string_equal(e, "styles:unsupported_parameter subseed_strength:unsupported_parameter "
                           "seed_resize_from_h:unsupported_parameter restore_faces:unsupported_parameter "
                           "tiling:unsupported_parameter enable_hr:unsupported_parameter "
                           "save_images:unsupported_parameter s_churn:unsupported_parameter "
                           "s_noise:unsupported_parameter refiner_checkpoint:unsupported_parameter "
                           "script_name:unsupported_parameter alwayson_scripts:unsupported_parameter "
                           "infotext:unsupported_parameter");
    sd_request_free(&r);
    a1111("{\"batch_size\": 8, \"n_iter\": 9, \"width\": 64, \"height\": 64}", false, &o, &r, e, sizeof e);
    assert_string_equal(e, "n_iter:max_images:64");
    sd_request_free(&r);
    a1111("{\"sampler_name\": \"DPM2 a\", \"scheduler\": \"Align Your Steps\", \"width\": 64, \"height\": 64}", false,
          &o, &r, e, sizeof e);
    assert_string_equal(e, "sampler_name:enum scheduler:enum");
    sd_request_free(&r);
    /* override_settings for this request only */
    a1111("{\"width\": 64, \"height\": 64, \"override_settings\": {\"CLIP_stop_at_last_layers\": 2, "
          "\"randn_source\": \"CPU\", \"show_progress_every_n_steps\": -1}}",
          false, &o, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.clip_skip, 1);
    assert_int_equal(r.rng, RB_TORCH_RNG_CPU);
    assert_int_equal(r.preview_every, 0);
    sd_request_free(&r);
    a1111("{\"width\": 64, \"height\": 64, \"override_settings\": {\"sd_model_checkpoint\": \"other\", "
          "\"randn_source\": \"NV\", \"sd_vae\": \"ft-mse\", \"foo\": 1}}",
          false, &o, &r, e, sizeof e);
    assert_string_equal(e, "override_settings.sd_model_checkpoint:read_only override_settings.randn_source:unsupported "
                           "override_settings.sd_vae:unsupported override_settings.foo:unknown_option");
    sd_request_free(&r);
    /* img2img: the image sets the size, 0.75 strength, masks with their refusals, inverted masks */
    char body[8192];
    char *img = png_b64(64, 32, 3, 10), *mask = png_b64(64, 32, 1, 255);
    snprintf(body, sizeof body, "{\"init_images\": [\"%s\"], \"mask\": \"%s\", \"inpainting_mask_invert\": 1, "
             "\"mask_blur\": 0, \"inpainting_fill\": 1, \"inpaint_full_res\": false, \"resize_mode\": 0}", img, mask);
    a1111(body, true, &o, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.width, 64);
    assert_int_equal(r.height, 32);
    assert_true(r.strength == 0.75);
    assert_int_equal(r.mask.data[0], 0); /* 255 inverted */
    sd_request_free(&r);
    snprintf(body, sizeof body, "{\"init_images\": [\"%s\", \"%s\"], \"mask\": \"%s\", \"mask_blur\": 4, "
             "\"inpainting_fill\": 0, \"inpaint_full_res\": true, \"denoising_strength\": 0}", img, img, mask);
    a1111(body, true, &o, &r, e, sizeof e);
    assert_string_equal(e, "mask_blur:unsupported_parameter inpainting_fill:unsupported_parameter "
                           "inpaint_full_res:unsupported_parameter init_images:unsupported_parameter "
                           "denoising_strength:range:>0..1");
    sd_request_free(&r);
    a1111("{\"init_images\": []}", true, &o, &r, e, sizeof e);
    assert_string_equal(e, "init_images:required");
    sd_request_free(&r);
    free(img);
    free(mask);
}

static void test_a1111_options(void **state) {
    (void)state;
    sd_a1111_options o;
    sd_a1111_options_init(&o);
    json_t *j = sd_a1111_options_json(&o, "m");
    char *s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"CLIP_stop_at_last_layers\":1,\"eta_noise_seed_delta\":0,\"live_previews_enable\":true,"
                           "\"randn_source\":\"GPU\",\"return_grid\":false,\"samples_format\":\"png\","
                           "\"sd_model_checkpoint\":\"m\",\"sd_vae\":\"Automatic\",\"show_progress_every_n_steps\":10}");
    free(s);
    /* what GET gives, POST takes back unchanged */
    wk_errors e = {.n = 0};
    sd_a1111_options o2 = o;
    sd_a1111_options_apply(j, &o2, "m", "", &e);
    assert_int_equal(e.n, 0);
    assert_memory_equal(&o2, &o, sizeof o);
    json_decref(j);
    j = js("{\"CLIP_stop_at_last_layers\": 3, \"randn_source\": \"CPU\", \"live_previews_enable\": false}");
    sd_a1111_options_apply(j, &o2, "m", "", &e);
    json_decref(j);
    assert_int_equal(e.n, 0);
    assert_int_equal(o2.clip_stop_at_last_layers, 3);
    assert_int_equal(o2.rng, RB_TORCH_RNG_CPU);
    assert_false(o2.live_previews_enable);
    j = js("{\"CLIP_stop_at_last_layers\": 13, \"samples_format\": \"jpg\", \"return_grid\": true, "
           "\"eta_noise_seed_delta\": 31337}");
    sd_a1111_options_apply(j, &o2, "m", "", &e);
    json_decref(j);
    char buf[512];
    errs_str(&e, buf, sizeof buf);
    assert_string_equal(buf, "CLIP_stop_at_last_layers:range:1..12 samples_format:unsupported return_grid:unsupported "
                             "eta_noise_seed_delta:unsupported");
}

static void openai(const char *text, bool edits, sd_gen_request *r, char *errs, size_t len) {
    json_t *j = js(text);
    wk_errors e = {.n = 0};
    sd_request_init(r, SD_API_OPENAI, &k_lim);
    sd_openai_parse(j, edits, &k_lim, r, &e);
    json_decref(j);
    errs_str(&e, errs, len);
}

static void test_openai_request(void **state) {
    (void)state;
    sd_gen_request r;
    char e[1024];
    openai("{\"prompt\": \"a cat\", \"n\": 2, \"size\": \"128x64\", \"response_format\": \"b64_json\", "
           "\"output_format\": \"jpeg\", \"output_compression\": 80, \"quality\": \"auto\", \"model\": \"dall-e-3\", "
           "\"user\": \"u\", \"background\": \"opaque\", \"moderation\": \"low\", \"seed\": 9, \"steps\": 3}",
           false, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.batch, 2);
    assert_int_equal(r.width, 128);
    assert_int_equal(r.height, 64);
    assert_int_equal(r.format, SD_OUT_JPEG);
    assert_int_equal(r.jpeg_quality, 80);
    assert_int_equal(r.seed, 9);
    assert_int_equal(r.steps, 3);
    assert_int_equal(r.prompt_mode, RB_SD_PROMPT_A1111);
    assert_false(r.emphasis);
    assert_int_equal(r.preview_every, 0);
    sd_request_free(&r);
    openai("{\"prompt\": \"a\", \"size\": \"auto\"}", false, &r, e, sizeof e);
    assert_string_equal(e, "");
    assert_int_equal(r.width, 64);
    assert_int_equal(r.format, SD_OUT_PNG);
    sd_request_free(&r);
    const char *bad_sizes[] = {"512", "64x", "x64", "64x64x", "-64x64", "64X64", "60x64", "264x64", "0x0", " 64x64"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"prompt\": \"a\", \"size\": \"%s\"}", bad_sizes[i]);
        openai(body, false, &r, e, sizeof e);
        assert_true(strncmp(e, "size:", 5) == 0);
        sd_request_free(&r);
    }
    openai("{\"prompt\": \"\", \"n\": 9, \"response_format\": \"url\", \"output_format\": \"webp\", "
           "\"output_compression\": 50, \"quality\": \"hd\", \"style\": \"vivid\", \"background\": \"transparent\", "
           "\"stream\": true, \"partial_images\": 2, \"strength\": 0.5}",
           false, &r, e, sizeof e);
    assert_string_equal(e, "prompt:non_empty n:range:1..8 response_format:unsupported_value "
                           "output_format:unsupported_value output_compression:needs:jpeg quality:unsupported_value "
                           "background:unsupported_value style:unsupported_parameter stream:unsupported_parameter "
                           "partial_images:unsupported_parameter strength:needs:image");
    sd_request_free(&r);
    openai("{\"n\": 1}", false, &r, e, sizeof e);
    assert_string_equal(e, "prompt:required");
    sd_request_free(&r);
}

/* ---- infotext ---- */

static void infotext_is(const char *text, const char *want_sorted_json) {
    json_t *o = sd_infotext_parse(text);
    assert_non_null(o);
    char *s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
    if (strcmp(s, want_sorted_json) != 0) fail_msg("infotext parse:\n got  %s\n want %s", s, want_sorted_json);
    free(s);
    json_decref(o);
}

static void test_infotext(void **state) {
    (void)state;
    /* what A1111's parse_generation_parameters returns for these texts (values are strings) */
    infotext_is("a cat, (sitting:1.2)\nNegative prompt: blurry\nSteps: 20, Sampler: DPM++ 2M, Schedule type: Karras, "
                "CFG scale: 7, Seed: 1, Size: 512x768, Model: sd15, RNG: CPU",
                "{\"CFG scale\":\"7\",\"Clip skip\":\"1\",\"Model\":\"sd15\",\"Negative prompt\":\"blurry\","
                "\"Prompt\":\"a cat, (sitting:1.2)\",\"RNG\":\"CPU\",\"Sampler\":\"DPM++ 2M\",\"Schedule type\":\"Karras\","
                "\"Seed\":\"1\",\"Size-1\":\"512\",\"Size-2\":\"768\",\"Steps\":\"20\"}");
    /* multi-line prompts, JSON-quoted values with commas and colons, escapes */
    infotext_is("line one\nline two\nNegative prompt: n1\nn2\nSteps: 4, Sampler: Euler, CFG scale: 7.5, Seed: 3, "
                "Lora hashes: \"a: 1, b: 2\", Note: \"say \\\"hi\\\"\", Clip skip: 2",
                "{\"CFG scale\":\"7.5\",\"Clip skip\":\"2\",\"Lora hashes\":\"a: 1, b: 2\",\"Negative prompt\":\"n1\\nn2\","
                "\"Note\":\"say \\\"hi\\\"\",\"Prompt\":\"line one\\nline two\",\"Sampler\":\"Euler\",\"Seed\":\"3\","
                "\"Steps\":\"4\"}");
    /* a last line with fewer than 3 parameters is part of the prompt */
    infotext_is("just a prompt\nSteps: 20, Seed: 1",
                "{\"Clip skip\":\"1\",\"Negative prompt\":\"\",\"Prompt\":\"just a prompt\\nSteps: 20, Seed: 1\"}");
    /* only parameters: an empty prompt */
    infotext_is("Steps: 5, Sampler: Heun, Seed: 2", "{\"Clip skip\":\"1\",\"Negative prompt\":\"\",\"Prompt\":\"\","
                                                    "\"Sampler\":\"Heun\",\"Seed\":\"2\",\"Steps\":\"5\"}");
    infotext_is("", "{\"Clip skip\":\"1\",\"Negative prompt\":\"\",\"Prompt\":\"\"}");
    /* an unterminated quote falls back to the plain value up to the comma; non-ASCII survives */
    infotext_is("\xc3\xa9t\xc3\xa9\nSteps: 1, Sampler: \"Eu, Seed: 4, Size: 8x16x2",
                "{\"Clip skip\":\"1\",\"Negative prompt\":\"\",\"Prompt\":\"\\u00E9t\\u00E9\",\"Sampler\":\"\\\"Eu\","
                "\"Seed\":\"4\",\"Size\":\"8x16x2\",\"Steps\":\"1\"}");
}

/* ---- previews ---- */

static void test_preview(void **state) {
    (void)state;
    /* the published factors, by hand: SD 1.x has no bias, SDXL does */
    static const double f1[4][3] = {{0.3512, 0.2297, 0.3227}, {0.3250, 0.4974, 0.2350}, {-0.2829, 0.1762, 0.2721},
                                    {-0.2120, -0.2616, -0.7177}};
    static const double fx[4][3] = {{0.3651, 0.4232, 0.4341}, {-0.2533, -0.0042, 0.1068}, {0.1076, 0.1111, -0.0362},
                                    {-0.3165, -0.2492, -0.2188}};
    static const double bx[3] = {0.1084, -0.0175, -0.0011};
    const int B = 2, C = 4, H = 3, W = 5;
    float lat[2 * 4 * 3 * 5];
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    tu_fill_uniform(&rng, lat, sizeof lat / sizeof lat[0], -3.0f, 3.0f);
    for (int arch = 0; arch < 2; arch++) {
        rb_image img = {0};
        TU_OK(sd_preview_image(arch ? RB_SD_ARCH_SDXL : RB_SD_ARCH_SD1, lat, B, C, H, W, &img, NULL));
        assert_int_equal(img.width, W * B);
        assert_int_equal(img.height, H);
        int off_by_one = 0;
        for (int b = 0; b < B; b++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int k = 0; k < 3; k++) {
                        double v = arch ? bx[k] : 0.0;
                        for (int c = 0; c < C; c++)
                            v += lat[((b * C + c) * H + y) * W + x] * (arch ? fx[c][k] : f1[c][k]);
                        v = (v + 1.0) / 2.0;
                        v = v < 0 ? 0 : v > 1 ? 1 : v;
                        const int want = (int)lrint(v * 255.0);
                        const int got = img.data[((size_t)y * (size_t)img.width + (size_t)(b * W + x)) * 3 + (size_t)k];
                        assert_true(abs(got - want) <= 1); /* float vs double rounding at .5 */
                        off_by_one += got != want;
                    }
        assert_true(off_by_one <= 2);
        rb_image_free(&img);
    }
    rb_image img = {0};
    assert_int_equal(sd_preview_image(RB_SD_ARCH_SD1, lat, 1, 16, 1, 1, &img, NULL), RB_E_UNSUPPORTED);
    uint8_t *png = NULL;
    size_t n = 0;
    TU_OK(sd_preview_png(NULL, RB_SD_ARCH_SD1, lat, B, C, H, W, &png, &n, NULL));
    rb_image back = {0};
    TU_OK(rb_image_decode(png, n, NULL, &back, NULL));
    assert_int_equal(back.width, 10);
    assert_int_equal(back.height, 3);
    rb_image_free(&back);
    free(png);
}

/* TAESD previews: the decoder's picture of tests/data/sd/taesd's reference
 * latents, the batch side by side, each pixel round(clamp(ref) x 255). */
static void test_preview_taesd(void **state) {
    (void)state;
    char p[1024];
    rb_backend *be = NULL;
    TU_OK(rb_backend_create("cpu", NULL, &be, NULL));
    rb_taesd *t = NULL;
    TU_OK(rb_taesd_load(tu_data(p, sizeof p, "sd/taesd/taesd_decoder.safetensors"), be, NULL, &t, NULL));
    rb_st_set *r = NULL;
    TU_OK(rb_st_open(tu_data(p, sizeof p, "sd/taesd/refs.safetensors"), &r, NULL));
    const float *lat = rb_st_find(r, "a_latents")->data, *ref = rb_st_find(r, "a_image")->data;
    const int B = 2, C = 4, H = 5, W = 7, S = 8;
    rb_image img = {0};
    TU_OK(sd_preview_taesd_image(t, lat, B, C, H, W, &img, NULL));
    assert_int_equal(img.width, W * S * B);
    assert_int_equal(img.height, H * S);
    int clipped = 0;
    for (int b = 0; b < B; b++)
        for (int y = 0; y < H * S; y++)
            for (int x = 0; x < W * S; x++)
                for (int k = 0; k < 3; k++) {
                    double v = ref[(((size_t)b * 3 + (size_t)k) * (size_t)(H * S) + (size_t)y) * (size_t)(W * S) + (size_t)x];
                    clipped += v < 0 || v > 1;
                    v = v < 0 ? 0 : v > 1 ? 1 : v;
                    const int got = img.data[((size_t)y * (size_t)img.width + (size_t)(b * W * S + x)) * 3 + (size_t)k];
                    assert_true(abs(got - (int)lrint(v * 255.0)) <= 1);
                }
    assert_true(clipped > 0); /* the clamp is exercised */
    rb_image_free(&img);
    float lat16[16 * 2 * 2] = {0};
    assert_int_equal(sd_preview_taesd_image(t, lat16, 1, 16, 2, 2, &img, NULL), RB_E_UNSUPPORTED);
    uint8_t *png = NULL;
    size_t n = 0;
    TU_OK(sd_preview_png(t, RB_SD_ARCH_SD1, lat, B, C, H, W, &png, &n, NULL));
    rb_image back = {0};
    TU_OK(rb_image_decode(png, n, NULL, &back, NULL));
    assert_int_equal(back.width, W * S * B);
    assert_int_equal(back.height, H * S);
    rb_image_free(&back);
    free(png);
    rb_st_close(r);
    rb_taesd_free(t);
    rb_backend_destroy(be);
}

/* ---- the tiled fallback ---- */

typedef struct fake_decode {
    int calls;
    rb_status first, second;
    rb_sd_tiling seen_tiling[2];
    int seen_tile[2];
} fake_decode;

static rb_status fake(void *user, const rb_sd_params *p, rb_sd_output *out, rb_error *err) {
    fake_decode *f = user;
    (void)out;
    if (f->calls < 2) {
        f->seen_tiling[f->calls] = p->vae_tiling;
        f->seen_tile[f->calls] = p->vae_tile;
    }
    rb_status s = f->calls++ == 0 ? f->first : f->second;
    return s == RB_OK ? RB_OK : rb_error_set(err, s, "fake decode %d", f->calls);
}

static void test_decode_fallback(void **state) {
    (void)state;
    rb_sd_params p;
    rb_sd_params_init(&p);
    rb_sd_output out = {0};
    rb_error err;
    bool retried;
    fake_decode f = {.first = RB_E_NOMEM, .second = RB_OK};
    TU_OK(sd_decode_fallback(fake, &f, &p, 32, &out, &retried, &err));
    assert_true(retried);
    assert_int_equal(f.calls, 2);
    assert_int_equal(f.seen_tiling[0], RB_SD_TILING_AUTO);
    assert_int_equal(f.seen_tiling[1], RB_SD_TILING_ON);
    assert_int_equal(f.seen_tile[1], 32);
    f = (fake_decode){.first = RB_E_NOMEM, .second = RB_E_NOMEM};
    assert_int_equal(sd_decode_fallback(fake, &f, &p, 32, &out, &retried, &err), RB_E_NOMEM);
    assert_true(retried);
    assert_string_equal(err.msg, "fake decode 2");
    f = (fake_decode){.first = RB_OK};
    TU_OK(sd_decode_fallback(fake, &f, &p, 32, &out, &retried, &err));
    assert_false(retried);
    assert_int_equal(f.calls, 1);
    f = (fake_decode){.first = RB_E_BACKEND}; /* only memory is retried */
    assert_int_equal(sd_decode_fallback(fake, &f, &p, 32, &out, &retried, &err), RB_E_BACKEND);
    assert_false(retried);
    f = (fake_decode){.first = RB_E_NOMEM}; /* latents too small to tile */
    assert_int_equal(sd_decode_fallback(fake, &f, &p, 0, &out, &retried, &err), RB_E_NOMEM);
    assert_false(retried);
    p.vae_tiling = RB_SD_TILING_ON; /* tiled already */
    f = (fake_decode){.first = RB_E_NOMEM, .second = RB_OK};
    assert_int_equal(sd_decode_fallback(fake, &f, &p, 32, &out, &retried, &err), RB_E_NOMEM);
    assert_int_equal(f.calls, 1);
}

static void test_sd_version(void **state) {
    (void)state;
    rb_sd_arch a;
    bool set, turbo;
    rb_sd_predict_opt pred;
    assert_true(sd_version_parse("auto", &a, &set, &pred, &turbo) && !set);
    assert_true(sd_version_parse("v1-5", &a, &set, &pred, &turbo) && set && a == RB_SD_ARCH_SD1 && !turbo);
    assert_true(sd_version_parse("v2-1", &a, &set, &pred, &turbo) && a == RB_SD_ARCH_SD2 && pred == RB_SD_PREDICT_AUTO);
    assert_true(sd_version_parse("v2-1-base", &a, &set, &pred, &turbo) && a == RB_SD_ARCH_SD2 &&
                pred == RB_SD_PREDICT_EPSILON);
    assert_true(sd_version_parse("XL", &a, &set, &pred, &turbo) && a == RB_SD_ARCH_SDXL && !turbo);
    assert_true(sd_version_parse("turbo", &a, &set, &pred, &turbo) && a == RB_SD_ARCH_SDXL && turbo);
    assert_true(sd_version_parse("xl-refiner", &a, &set, &pred, &turbo) && a == RB_SD_ARCH_SDXL_REFINER);
    assert_false(sd_version_parse("v3", &a, &set, &pred, &turbo));
    assert_false(sd_version_parse("", &a, &set, &pred, &turbo));
}

/* AUTOMATIC1111's "Euler" on an SD3 model is its flow-matching Euler; other APIs and families keep euler. */
static void test_sd3_euler(void **state) {
    (void)state;
    sd_gen_request r;
    rb_sd_params p;
    sd_request_init(&r, SD_API_A1111, &k_lim);
    r.sampler = RB_SD_SAMPLER_EULER;
    r.sampler_set = true;
    sd_request_params(&r, 0, &p);
    sd_request_params_arch(&r, RB_SD_ARCH_SDXL, &p);
    assert_string_equal(p.sampler, "euler");
    sd_request_params_arch(&r, RB_SD_ARCH_SD3, &p);
    assert_string_equal(p.sampler, "flow_euler");
    sd_request_free(&r);
    sd_request_init(&r, SD_API_RBEE, &k_lim);
    r.sampler = RB_SD_SAMPLER_EULER;
    r.sampler_set = true;
    sd_request_params(&r, 0, &p);
    sd_request_params_arch(&r, RB_SD_ARCH_SD3, &p);
    assert_string_equal(p.sampler, "euler"); /* rbee names are diffusers' classes: euler is EulerDiscreteScheduler */
    sd_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),         cmocka_unit_test(test_sampler_names),
        cmocka_unit_test(test_sd3_euler),
        cmocka_unit_test(test_rbee_request),   cmocka_unit_test(test_a1111_request),
        cmocka_unit_test(test_a1111_options),  cmocka_unit_test(test_openai_request),
        cmocka_unit_test(test_infotext),       cmocka_unit_test(test_preview), cmocka_unit_test(test_preview_taesd),
        cmocka_unit_test(test_decode_fallback), cmocka_unit_test(test_sd_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
