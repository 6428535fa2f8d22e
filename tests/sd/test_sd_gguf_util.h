/* Helpers of the SD GGUF tests (test_sd_gguf_*.c): a temporary copy of a
 * fixture pipeline folder with the shared weights resolved (the fixtures
 * store them as text stubs holding a relative path), conversion into a
 * temporary folder, and running the networks on the diffusers reference
 * inputs. Header-only (static inline), each test file being its own program. */
#ifndef RBEE_TEST_SD_GGUF_UTIL_H
#define RBEE_TEST_SD_GGUF_UTIL_H

#include "sd_nets_ref.h"

#include "rbee/gguf.h"
#include "rbee/quant.h"
#include "sd/sd_convert.h"
#include "sd/sd_gguf.h"

#include <sys/stat.h>

/* snprintf into an array, failing the test when it does not fit. */
#define FMT(buf, ...)                                                                                          \
    do {                                                                                                       \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) fail_msg("%s: name too long", #buf);    \
    } while (0)

/* The real file behind a fixture weights file (following a text stub); malloc'ed. */
static inline char *resolve_weights(const char *path) {
    size_t n;
    char *txt = tu_read_file(path, &n);
    char target[2048];
    if (n < 512 && strncmp(txt, "../", 3) == 0) {
        while (n && (txt[n - 1] == '\n' || txt[n - 1] == ' ')) txt[--n] = '\0';
        const char *slash = strrchr(path, '/');
        FMT(target, "%.*s/%s", (int)(slash - path), path, txt);
    } else {
        FMT(target, "%s", path);
    }
    free(txt);
    char *real = realpath(target, NULL);
    if (!real) fail_msg("cannot resolve %s", target);
    return real;
}

/* A temporary pipeline folder for fixture pipeline `pipe`: each component's
 * config.json and its weights (a symbolic link to the real file), the
 * scheduler config and the tokenizer configs. */
static inline void make_pipeline(char *dir, size_t cap, const char *pipe) {
    if (tu_tmpdir_make(dir, cap, "rbee_sdg_") != 0) fail_msg("cannot make a temporary folder");
    static const struct { const char *comp, *weights, *json; } parts[] = {
        {"unet", "diffusion_pytorch_model.safetensors", "config.json"},
        {"vae", "diffusion_pytorch_model.safetensors", "config.json"},
        {"text_encoder", "model.safetensors", "config.json"},
        {"text_encoder_2", "model.safetensors", "config.json"},
        {"scheduler", NULL, "scheduler_config.json"},
        {"tokenizer", NULL, "tokenizer_config.json"},
        {"tokenizer_2", NULL, "tokenizer_config.json"},
    };
    char base[1024];
    tu_fixture(base, sizeof base, "diffusers/pipelines");
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char src[1024], dst[1024];
        FMT(src, "%s/%s/%s/%s", base, pipe, parts[i].comp, parts[i].json);
        if (access(src, R_OK) != 0) continue;
        FMT(dst, "%s/%s", dir, parts[i].comp);
        if (mkdir(dst, 0755) != 0) fail_msg("cannot make %s", dst);
        FMT(dst, "%s/%s/%s", dir, parts[i].comp, parts[i].json);
        copy_file(src, dst);
        if (!parts[i].weights) continue;
        char *slash = strrchr(src, '/');
        if (snprintf(slash + 1, sizeof src - (size_t)(slash + 1 - src), "%s", parts[i].weights) >=
            (int)(sizeof src - (size_t)(slash + 1 - src)))
            fail_msg("path too long");
        char *real = resolve_weights(src);
        FMT(dst, "%s/%s/%s", dir, parts[i].comp, parts[i].weights);
        if (symlink(real, dst) != 0) fail_msg("cannot link %s", dst);
        free(real);
    }
}

/* Converts input into <tmp>/<file>; returns the path in out. */
static inline const char *convert_into(char *out, size_t cap, const char *tmp, const char *file, const char *input,
                                       rb_dtype t, const char *config_dir) {
    snprintf(out, cap, "%s/%s", tmp, file);
    rb_convert_opts o = {.type = t};
    rb_convert_stats st;
    rb_error err;
    rb_error_clear(&err);
    if (sd_convert_to_gguf(input, out, &o, config_dir, &st, &err) != RB_OK) fail_msg("convert %s: %s", input, err.msg);
    return out;
}

/* A fixture pipeline converted to GGUF type t: <tmp>/<pipe>-<t>.gguf. */
static inline const char *convert_pipe(char *out, size_t cap, const char *tmp, const char *pipe, rb_dtype t) {
    char dir[512], file[128];
    make_pipeline(dir, sizeof dir, pipe);
    FMT(file, "%s-%s.gguf", pipe, rb_dtype_name(t));
    convert_into(out, cap, tmp, file, dir, t, NULL);
    tu_tmpdir_remove(dir);
    return out;
}

static inline sd_gguf_model load_gguf(const char *path, rb_backend *be, const rb_sd_load_opts *o, unsigned comp) {
    sd_gguf_model m;
    rb_error err;
    rb_error_clear(&err);
    if (sd_gguf_load(path, NULL, be, o, comp, &m, &err) != RB_OK) fail_msg("load %s: %s", path, err.msg);
    return m;
}

/* One UNet call on host inputs; returns the output (malloc'ed). */
static inline float *unet_call(rb_unet *u, rb_backend *be, const float *sample, int64_t W, int64_t H, int64_t B,
                               float t, const float *ctx, int64_t T, const float *text_embeds, const float *time_ids) {
    const rb_unet_config *c = rb_unet_get_config(u);
    rb_tensor x = dev_tensor(be, W, H, c->in_channels, B, sample);
    rb_tensor k = dev_tensor(be, c->cross_attention_dim, T, B, 1, ctx);
    rb_tensor out = dev_tensor(be, W, H, c->out_channels, B, NULL), te = {0};
    float ts[16];
    for (int64_t b = 0; b < B; b++) ts[b] = t;
    rb_unet_inputs in = {.sample = &x, .timesteps = ts, .context = &k};
    if (c->add_text_time) {
        const int64_t Dt = c->projection_class_embeddings_input_dim - 6 * c->addition_time_embed_dim;
        te = dev_tensor(be, Dt, B, 1, 1, text_embeds);
        in.text_embeds = &te;
        in.time_ids = time_ids;
        in.n_time_ids = 6;
    }
    rb_error err;
    rb_error_clear(&err);
    if (rb_unet_forward(u, &in, &out, &err) != RB_OK) fail_msg("unet: %s", err.msg);
    float *o = dev_read(&out);
    rb_tensor_free(&x);
    rb_tensor_free(&k);
    rb_tensor_free(&out);
    if (te.buf) rb_tensor_free(&te);
    return o;
}

/* The UNet on the fixture's denoiser call j; *n = output elements. */
static inline float *denoiser_call(rb_unet *u, rb_backend *be, const rb_st_set *ref, int j, int64_t *n) {
    const rb_unet_config *c = rb_unet_get_config(u);
    const rb_st_tensor *st = rb_st_find(ref, "sample");
    assert_non_null(st);
    const int64_t W = st->ne[0], H = st->ne[1], B = st->ne[3];
    int64_t nctx;
    const float *ctx = ref_f32(ref, "encoder_hidden_states", &nctx);
    char name[64];
    FMT(name, "call%d.timestep", j);
    const float t = ref_f32(ref, name, NULL)[0];
    *n = W * H * c->out_channels * B;
    return unet_call(u, be, ref_f32(ref, "sample", NULL), W, H, B, t, ctx, nctx / (B * c->cross_attention_dim),
                     c->add_text_time ? ref_f32(ref, "text_embeds", NULL) : NULL,
                     c->add_text_time ? ref_f32(ref, "time_ids", NULL) : NULL);
}

/* VAE decode of the fixture's decode.in; *n = output elements. */
static inline float *vae_decode_ref(rb_vae *v, rb_backend *be, const rb_st_set *ref, int64_t *n) {
    const rb_st_tensor *zt = rb_st_find(ref, "decode.in");
    assert_non_null(zt);
    const int64_t w = zt->ne[0], h = zt->ne[1], s = rb_vae_scale(v);
    rb_tensor lt = dev_tensor(be, w, h, zt->ne[2], 1, ref_f32(ref, "decode.in", NULL));
    rb_tensor img = dev_tensor(be, w * s, h * s, 3, 1, NULL);
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_decode(v, &lt, &img, &err) != RB_OK) fail_msg("vae decode: %s", err.msg);
    float *o = dev_read(&img);
    *n = w * s * h * s * 3;
    rb_tensor_free(&lt);
    rb_tensor_free(&img);
    return o;
}

/* VAE encode mean of the fixture's encode.in; *n = output elements. */
static inline float *vae_encode_ref(rb_vae *v, rb_backend *be, const rb_st_set *ref, int64_t *n) {
    const rb_st_tensor *xt = rb_st_find(ref, "encode.in");
    assert_non_null(xt);
    const int64_t W = xt->ne[0], H = xt->ne[1], s = rb_vae_scale(v), w = W / s, h = H / s;
    const int64_t lc = rb_vae_get_config(v)->latent_channels;
    rb_tensor x = dev_tensor(be, W, H, 3, 1, ref_f32(ref, "encode.in", NULL));
    rb_tensor mean = dev_tensor(be, w, h, lc, 1, NULL);
    rb_error err;
    rb_error_clear(&err);
    if (rb_vae_encode(v, &x, &mean, NULL, &err) != RB_OK) fail_msg("vae encode: %s", err.msg);
    float *o = dev_read(&mean);
    *n = w * h * lc;
    rb_tensor_free(&x);
    rb_tensor_free(&mean);
    return o;
}

/* A text encoder on the fixture's [negative, prompt] ids of tokenizer tok:
 * hidden state `index` (or, index < 0, the last hidden state; with
 * pooled/projected output into *pool, malloc'ed, when pool is not NULL). */
static inline float *text_encode(rb_clip_text *m, rb_backend *be, const rb_st_set *ref, const char *tok, int index,
                                 float **pool) {
    const rb_clip_text_config *c = rb_clip_text_get_config(m);
    int32_t ids[2 * 77];
    char n[128];
    FMT(n, "negative.%s.input_ids", tok);
    ref_ids(ref, n, ids, 77);
    FMT(n, "prompt.%s.input_ids", tok);
    ref_ids(ref, n, ids + 77, 77);
    rb_tensor h = dev_tensor(be, c->hidden_size, 77, 2, 1, NULL);
    const int64_t pd = c->with_projection ? c->projection_dim : c->hidden_size;
    rb_tensor p = dev_tensor(be, pd, 2, 1, 1, NULL);
    rb_clip_text_outputs o = {0};
    if (index >= 0) {
        o.hidden = &h;
        o.hidden_index = index;
    } else {
        o.last_hidden = &h;
    }
    if (pool) {
        if (c->with_projection) o.text_embeds = &p;
        else o.pooled = &p;
    }
    rb_error err;
    rb_error_clear(&err);
    if (rb_clip_text_encode(m, ids, 77, 2, &o, &err) != RB_OK) fail_msg("text encode: %s", err.msg);
    float *out = dev_read(&h);
    if (pool) *pool = dev_read(&p);
    rb_tensor_free(&h);
    rb_tensor_free(&p);
    return out;
}

/* Every tensor of two open GGUF files: same names in order, dtypes, shapes
 * and bytes (metadata aside). */
static inline void expect_same_tensors(const char *a_path, const char *b_path) {
    rb_gguf *a = NULL, *b = NULL;
    TU_OK(rb_gguf_open(a_path, &a, NULL));
    TU_OK(rb_gguf_open(b_path, &b, NULL));
    assert_int_equal(rb_gguf_n_tensors(a), rb_gguf_n_tensors(b));
    for (int64_t i = 0; i < rb_gguf_n_tensors(a); i++) {
        const rb_gguf_tensor_info *x = rb_gguf_tensor_at(a, i), *y = rb_gguf_tensor_at(b, i);
        assert_int_equal(x->name.len, y->name.len);
        assert_memory_equal(x->name.ptr, y->name.ptr, x->name.len);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->n_dims, y->n_dims);
        assert_memory_equal(x->ne, y->ne, sizeof x->ne);
        assert_int_equal(x->nbytes, y->nbytes);
        if (memcmp(x->data, y->data, x->nbytes) != 0)
            fail_msg("%.*s differs between %s and %s", (int)x->name.len, x->name.ptr, a_path, b_path);
    }
    rb_gguf_close(a);
    rb_gguf_close(b);
}

#endif
