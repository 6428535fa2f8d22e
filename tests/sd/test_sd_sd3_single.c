/* SD3 single-file checkpoints seen through diffusers' names (src/sd/sd_sd3*),
 * against the fixtures: tests/data/sd3/single_file/sd3.safetensors holds the
 * tiny sd3 pipeline of tests/data/sd3/pipelines/sd3 in the original layout
 * (diffusers' own from_single_file gives back its transformer exactly), so
 * every tensor of the folder's transformer, VAE and three text encoders must
 * be found under its diffusers name with the same shape and bytes, each map a
 * bijection, and the configs the tensors show must be the folder's
 * config.json values. The SD3.5 options (qk-norm, dual attention) are
 * checked on an MMDiT-only file built here from pipelines/sd35 by the
 * inverse of diffusers' conversion (q/k/v concatenated, the last context
 * adaLN's and the final layer's halves swapped), which also covers text
 * encoders given as separate files. Bad files (missing or misshapen
 * tensors, a missing block, a truncated file, mismatched encoders) give
 * errors naming the problem. */
#include "testutil.h"

#include "rbee/safetensors.h"
#include "rbee/sd_pipeline.h"
#include "sd/sd_sd3.h"
#include "sd3_single_ref.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(expr, err)                                                                                                 \
    do {                                                                                                              \
        rb_status s_ = (expr);                                                                                        \
        if (s_ != RB_OK) fail_msg("%s -> %s: %s", #expr, rb_status_str(s_), (err).msg);                               \
    } while (0)

static rb_st_set *open_data(const char *rel) {
    char path[512];
    rb_st_set *s = NULL;
    rb_error err;
    OK(rb_st_open(tu_data(path, sizeof path, rel), &s, &err), err);
    return s;
}

static json_t *load_json(const char *rel) {
    char path[512];
    json_error_t je;
    json_t *j = json_load_file(tu_data(path, sizeof path, rel), 0, &je);
    if (!j) fail_msg("%s: %s", rel, je.text);
    return j;
}

static int64_t jint(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) fail_msg("config: %s is not an integer", k);
    return (int64_t)json_integer_value(v);
}

static rb_status build_set(const rb_st_set *ck, sd_sd3 *s, rb_error *err) {
    sd_tensor_list tl;
    rb_status st = sd_tensor_list_st(ck, &tl, err);
    if (st == RB_OK) st = sd_sd3_build(&tl, s, err);
    sd_tensor_list_free(&tl);
    return st;
}

static rb_status add_text_set(sd_sd3 *s, sd_sd3_part part, const rb_st_set *f, rb_error *err) {
    sd_tensor_list tl;
    rb_status st = sd_tensor_list_st(f, &tl, err);
    if (st == RB_OK) st = sd_sd3_add_text(s, part, &tl, "separate file", err);
    sd_tensor_list_free(&tl);
    return st;
}

/* Every tensor of the folder file rel is in m with its dtype, shape (or a
 * linear [C, C] stored as a 1x1 convolution) and bytes, and m holds nothing
 * else. */
static void check_component(const sd_name_map *m, const char *rel) {
    rb_st_set *ref = open_data(rel);
    for (int64_t i = 0; i < rb_st_n_tensors(ref); i++) {
        const rb_st_tensor *r = rb_st_tensor_at(ref, i);
        const rb_st_tensor *t = sd_name_map_find(m, r->name);
        if (!t) fail_msg("%s: %s is not in the single file's map", rel, r->name);
        assert_int_equal(t->dtype, r->dtype);
        assert_int_equal(t->nbytes, r->nbytes);
        if (t->n_dims == r->n_dims) {
            for (int d = 0; d < r->n_dims; d++)
                if (t->ne[d] != r->ne[d]) fail_msg("%s: %s: dim %d is %lld, not %lld", rel, r->name, d,
                                                   (long long)t->ne[d], (long long)r->ne[d]);
        } else {
            assert_int_equal(r->n_dims, 2);
            assert_int_equal(t->n_dims, 4);
            assert_int_equal(t->ne[0] * t->ne[1], 1);
            assert_int_equal(t->ne[2], r->ne[0]);
            assert_int_equal(t->ne[3], r->ne[1]);
        }
        if (memcmp(t->data, r->data, r->nbytes) != 0) fail_msg("%s: %s differs", rel, r->name);
    }
    if ((int64_t)m->n != rb_st_n_tensors(ref))
        fail_msg("%s: %zu mapped tensors for %lld in the folder", rel, m->n, (long long)rb_st_n_tensors(ref));
    rb_st_close(ref);
}

/* The MMDiT's derived config = transformer/config.json. */
static void check_mmdit_config(const sd_sd3_mmdit_shape *sh, const char *pipe) {
    char rel[256];
    snprintf(rel, sizeof rel, "sd3/pipelines/%s/transformer/config.json", pipe);
    json_t *c = load_json(rel);
    assert_int_equal(sh->num_layers, jint(c, "num_layers"));
    assert_int_equal(sh->caption_projection_dim, jint(c, "caption_projection_dim"));
    assert_int_equal(sh->joint_attention_dim, jint(c, "joint_attention_dim"));
    assert_int_equal(sh->pooled_projection_dim, jint(c, "pooled_projection_dim"));
    assert_int_equal(sh->pos_embed_max_size, jint(c, "pos_embed_max_size"));
    assert_int_equal(sh->patch_size, jint(c, "patch_size"));
    assert_int_equal(sh->in_channels, jint(c, "in_channels"));
    assert_int_equal(sh->out_channels, jint(c, "out_channels"));
    assert_int_equal(sh->width, jint(c, "num_attention_heads") * jint(c, "attention_head_dim"));
    assert_int_equal(sh->ff_inner, 4 * sh->width);
    assert_int_equal(sh->time_proj_dim, 256);
    const json_t *qk = json_object_get(c, "qk_norm");
    assert_int_equal(sh->qk_norm, json_is_string(qk));
    if (sh->qk_norm) {
        assert_string_equal(json_string_value(qk), "rms_norm");
        /* the head size shows in the norms: heads are exact */
        assert_int_equal(sh->num_attention_heads, jint(c, "num_attention_heads"));
        assert_int_equal(sh->attention_head_dim, jint(c, "attention_head_dim"));
    } else {
        /* no qk-norm and a width of 32: the published head size 64 does not
         * fit, so the heads are not derivable (a config must say) */
        assert_int_equal(sh->num_attention_heads, 0);
        assert_int_equal(sh->attention_head_dim, 0);
    }
    const json_t *dual = json_object_get(c, "dual_attention_layers");
    assert_int_equal(sh->n_dual, (int)json_array_size(dual));
    for (int i = 0; i < sh->n_dual; i++)
        assert_int_equal(sh->dual_attention_layers[i], json_integer_value(json_array_get(dual, (size_t)i)));
    json_decref(c);
}

static void check_t5_config(const sd_t5_shape *t) {
    json_t *c = load_json("sd3/pipelines/sd3/text_encoder_3/config.json");
    assert_true(t->present);
    assert_int_equal(t->d_model, jint(c, "d_model"));
    assert_int_equal(t->d_ff, jint(c, "d_ff"));
    assert_int_equal(t->d_kv, jint(c, "d_kv"));
    assert_int_equal(t->n_heads, jint(c, "num_heads"));
    assert_int_equal(t->n_layers, jint(c, "num_layers"));
    assert_int_equal(t->vocab, jint(c, "vocab_size"));
    assert_int_equal(t->n_buckets, jint(c, "relative_attention_num_buckets"));
    assert_true(t->gated);
    assert_string_equal(json_string_value(json_object_get(c, "feed_forward_proj")), "gated-gelu");
    json_decref(c);
}

static void check_clip_config(const sd_ldm_text_shape *s, const char *comp) {
    char rel[256];
    snprintf(rel, sizeof rel, "sd3/pipelines/sd3/%s/config.json", comp);
    json_t *c = load_json(rel);
    assert_true(s->present);
    assert_int_equal(s->hidden, jint(c, "hidden_size"));
    assert_int_equal(s->intermediate, jint(c, "intermediate_size"));
    assert_int_equal(s->n_layers, jint(c, "num_hidden_layers"));
    assert_int_equal(s->vocab, jint(c, "vocab_size"));
    assert_int_equal(s->positions, jint(c, "max_position_embeddings"));
    assert_int_equal(s->projection, jint(c, "projection_dim"));
    json_decref(c);
}

static void test_sd3_single_file(void **state) {
    (void)state;
    rb_st_set *ck = open_data("sd3/single_file/sd3.safetensors");
    sd_tensor_list tl;
    rb_error err;
    OK(sd_tensor_list_st(ck, &tl, &err), err);
    assert_true(sd_sd3_detect(&tl));
    sd_tensor_list_free(&tl);
    sd_sd3 s;
    OK(build_set(ck, &s, &err), err);
    assert_int_equal(s.present, SD_SD3_MMDIT | SD_SD3_VAE | SD_SD3_CLIP_L | SD_SD3_CLIP_G | SD_SD3_T5);
    OK(sd_sd3_require(&s, s.present, "sd3.safetensors", &err), err);
    check_component(&s.mmdit, "sd3/pipelines/sd3/transformer/diffusion_pytorch_model.safetensors");
    check_component(&s.ldm.vae, "sd3/pipelines/sd3/vae/diffusion_pytorch_model.safetensors");
    check_component(&s.ldm.text1, "sd3/pipelines/sd3/text_encoder/model.safetensors");
    check_component(&s.ldm.text2, "sd3/pipelines/sd3/text_encoder_2/model.safetensors");
    check_component(&s.t5, "sd3/pipelines/sd3/text_encoder_3/model.safetensors");
    check_mmdit_config(&s.mmdit_shape, "sd3");
    check_t5_config(&s.t5_shape);
    check_clip_config(&s.ldm.text1_shape, "text_encoder");
    check_clip_config(&s.ldm.text2_shape, "text_encoder_2");
    json_t *vc = load_json("sd3/pipelines/sd3/vae/config.json");
    const json_t *bo = json_object_get(vc, "block_out_channels");
    assert_int_equal(s.ldm.vae_shape.n_levels, (int)json_array_size(bo));
    for (int i = 0; i < s.ldm.vae_shape.n_levels; i++)
        assert_int_equal(s.ldm.vae_shape.channels[i], json_integer_value(json_array_get(bo, (size_t)i)));
    assert_int_equal(s.ldm.vae_shape.layers_per_block, jint(vc, "layers_per_block"));
    assert_int_equal(s.ldm.vae_shape.latent_channels, jint(vc, "latent_channels"));
    assert_true(s.ldm.vae_shape.has_encoder);
    assert_null(sd_name_map_find(&s.ldm.vae, "quant_conv.weight")); /* SD3's VAE has none */
    json_decref(vc);
    sd_sd3_free(&s);
    rb_st_close(ck);
    /* the pipeline loader says what it is and what it needs (its configs
     * folder), not that an SD 1.x encoder is missing */
    rb_backend *be = NULL;
    OK(rb_backend_create("cpu", NULL, &be, &err), err);
    rb_sd_model *m = NULL;
    char path[512];
    assert_int_equal(rb_sd_model_load(tu_data(path, sizeof path, "sd3/single_file/sd3.safetensors"), be, NULL, &m, &err),
                     RB_E_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err.msg, "is an SD3 / SD3.5 model file: give a diffusers SD3 folder"));
    rb_backend_destroy(be);
}

/* An edit of a copied file: drop `drop`, rename `from` to `to`, keep only
 * `rows` rows of `cut` (its leading bytes). */
typedef struct edit {
    const char *drop, *from, *to, *cut;
    int64_t rows;
} edit;

static uint8_t *copy_edited(const rb_st_set *src, const edit *e, size_t *size) {
    img b = img_new();
    for (int64_t i = 0; i < rb_st_n_tensors(src); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(src, i);
        if (e->drop && !strcmp(t->name, e->drop)) continue;
        const char *name = e->from && !strcmp(t->name, e->from) ? e->to : t->name;
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        size_t nb = t->nbytes;
        if (e->cut && !strcmp(t->name, e->cut)) {
            nb = nb / (size_t)ne[t->n_dims - 1] * (size_t)e->rows;
            ne[t->n_dims - 1] = e->rows;
        }
        img_add(&b, name, t->dtype, t->n_dims, ne, t->data, nb);
    }
    return img_finish(&b, size);
}

/* Builds sd3.safetensors with one edit; returns the status and the message. */
static rb_status build_edited(const edit *e, rb_error *err) {
    rb_st_set *ck = open_data("sd3/single_file/sd3.safetensors");
    size_t n = 0;
    uint8_t *im = copy_edited(ck, e, &n);
    rb_st_close(ck);
    rb_st_set *ed = NULL;
    rb_status st = rb_st_open_memory(im, n, &ed, err);
    if (st == RB_OK) {
        sd_sd3 s;
        st = build_set(ed, &s, err);
        if (st == RB_OK) sd_sd3_free(&s);
        rb_st_close(ed);
    }
    free(im);
    return st;
}

static void expect_error(const edit *e, rb_status want, const char *msg_part) {
    rb_error err = {0};
    rb_status st = build_edited(e, &err);
    if (st != want) fail_msg("expected %s, got %s: %s", rb_status_str(want), rb_status_str(st), err.msg);
    if (!strstr(err.msg, msg_part)) fail_msg("message \"%s\" does not say \"%s\"", err.msg, msg_part);
}

static void test_bad_files(void **state) {
    (void)state;
    static const char P[] = "model.diffusion_model.";
    char a[160], b[160];
    /* a missing block tensor */
    snprintf(a, sizeof a, "%sjoint_blocks.1.x_block.mlp.fc2.weight", P);
    expect_error(&(edit){.drop = a}, RB_E_FORMAT, "transformer_blocks.1.ff.net.2.weight is missing");
    snprintf(a, sizeof a, "%sjoint_blocks.0.context_block.attn.qkv.bias", P);
    expect_error(&(edit){.drop = a}, RB_E_FORMAT, "transformer_blocks.0.attn.add_q_proj.bias is missing");
    snprintf(a, sizeof a, "%sfinal_layer.adaLN_modulation.1.weight", P);
    expect_error(&(edit){.drop = a}, RB_E_FORMAT, "norm_out.linear.weight is missing");
    /* a qkv of the wrong shape: rows not three projections, or three of the wrong width */
    snprintf(a, sizeof a, "%sjoint_blocks.0.x_block.attn.qkv.weight", P);
    expect_error(&(edit){.cut = a, .rows = 95}, RB_E_FORMAT, "is not three stacked projections");
    expect_error(&(edit){.cut = a, .rows = 93}, RB_E_FORMAT,
                 "transformer_blocks.0.attn.to_q.weight has shape [31, 32], expected [32, 32]");
    /* an odd modulation, a non-square position table */
    snprintf(a, sizeof a, "%sjoint_blocks.1.context_block.adaLN_modulation.1.bias", P);
    expect_error(&(edit){.cut = a, .rows = 63}, RB_E_FORMAT, "is not a (shift, scale) modulation");
    snprintf(a, sizeof a, "%spos_embed", P);
    expect_error(&(edit){.drop = a}, RB_E_FORMAT, "pos_embed is missing or holds 0 positions");
    /* a block missing from the numbering, an unknown part */
    snprintf(a, sizeof a, "%sjoint_blocks.1.x_block.mlp.fc2.weight", P);
    snprintf(b, sizeof b, "%sjoint_blocks.3.x_block.mlp.fc2.weight", P);
    expect_error(&(edit){.from = a, .to = b}, RB_E_FORMAT, "joint block 2 of 0..3 is missing");
    snprintf(b, sizeof b, "%sjoint_blocks.1.x_block.mlp.fc3.weight", P);
    expect_error(&(edit){.from = a, .to = b}, RB_E_FORMAT, "unexpected tensor name");
    /* a context stream before the last one needs its output projection */
    snprintf(a, sizeof a, "%sjoint_blocks.0.context_block.attn.proj.weight", P);
    expect_error(&(edit){.drop = a}, RB_E_FORMAT, "transformer_blocks.0.attn.to_add_out.weight is missing");
    /* text encoders: a missing projection, a T5 layer norm, a misshapen T5 weight */
    expect_error(&(edit){.drop = "text_encoders.clip_g.transformer.text_projection.weight"}, RB_E_FORMAT,
                 "CLIP-G text encoder: text_projection is missing");
    expect_error(&(edit){.drop = "text_encoders.t5xxl.transformer.encoder.block.1.layer.1.layer_norm.weight"},
                 RB_E_FORMAT, "encoder.block.1.layer.1.layer_norm.weight is missing");
    expect_error(&(edit){.cut = "text_encoders.t5xxl.transformer.encoder.block.1.layer.1.DenseReluDense.wo.weight",
                         .rows = 31},
                 RB_E_FORMAT, "wo.weight has shape [31, 48], expected [32, 48]");
    /* the T5 embedding table */
    expect_error(&(edit){.drop = "text_encoders.t5xxl.transformer.shared.weight"}, RB_E_FORMAT, "shared.weight");
    /* the VAE as the LDM map sees it */
    expect_error(&(edit){.drop = "first_stage_model.decoder.up.0.block.0.conv2.weight"}, RB_E_FORMAT, "VAE");
    /* no MMDiT: not SD3 */
    rb_error err = {0};
    sd_sd3 s;
    const rb_st_tensor one = {.name = "model.diffusion_model.input_blocks.0.0.weight", .dtype = RB_F16, .n_dims = 1,
                              .ne = {1, 1, 1, 1}, .nbytes = 2, .data = "\0\0"};
    sd_tensor_list l = {.t = &one, .n = 1};
    assert_false(sd_sd3_detect(&l));
    assert_int_equal(sd_sd3_build(&l, &s, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "not an SD3 checkpoint"));
    /* a truncated file: an error from the reader, never a crash */
    char path[512];
    size_t n = 0;
    uint8_t *whole = tu_read_file(tu_data(path, sizeof path, "sd3/single_file/sd3.safetensors"), &n);
    const size_t cuts[] = {0, 7, 8, 100, n / 2, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        rb_st_set *t = NULL;
        if (rb_st_open_memory(whole, cuts[k], &t, &err) == RB_OK) fail_msg("a file cut at %zu opened", cuts[k]);
        assert_null(t);
    }
    free(whole);
}

static void check_sd35(const char *prefix) {
    size_t n = 0;
    uint8_t *im = sd35_original(prefix, &n);
    rb_st_set *ck = NULL;
    rb_error err = {0};
    OK(rb_st_open_memory(im, n, &ck, &err), err);
    sd_sd3 s;
    OK(build_set(ck, &s, &err), err);
    assert_int_equal(s.present, SD_SD3_MMDIT);
    check_component(&s.mmdit, "sd3/pipelines/sd35/transformer/diffusion_pytorch_model.safetensors");
    check_mmdit_config(&s.mmdit_shape, "sd35");
    /* no VAE or text encoders: the error names each with its prefix */
    assert_int_equal(sd_sd3_require(&s, SD_SD3_VAE | SD_SD3_CLIP_L | SD_SD3_T5, "sd35.safetensors", &err),
                     RB_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "sd35.safetensors has no VAE (first_stage_model.*)"));
    assert_non_null(strstr(err.msg, "CLIP-L text encoder (text_encoders.clip_l.transformer.*)"));
    assert_non_null(strstr(err.msg, "T5 text encoder (text_encoders.t5xxl.transformer.*)"));
    assert_null(strstr(err.msg, "CLIP-G"));
    /* the encoders from separate files in transformers' names */
    rb_st_set *l = open_data("sd3/pipelines/sd35/text_encoder/model.safetensors");
    rb_st_set *g = open_data("sd3/pipelines/sd35/text_encoder_2/model.safetensors");
    rb_st_set *t5 = open_data("sd3/pipelines/sd35/text_encoder_3/model.safetensors");
    assert_int_equal(add_text_set(&s, SD_SD3_T5, l, &err), RB_E_FORMAT); /* CLIP is no T5 */
    /* CLIP-L given for CLIP-G: the pooled widths do not add up */
    assert_int_equal(add_text_set(&s, SD_SD3_CLIP_L, l, &err), RB_OK);
    assert_int_equal(add_text_set(&s, SD_SD3_CLIP_G, l, &err), RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "pooled input is 20 wide"));
    assert_int_equal(s.present, SD_SD3_MMDIT | SD_SD3_CLIP_L);
    assert_int_equal(add_text_set(&s, SD_SD3_CLIP_L, l, &err), RB_E_INVALID);
    OK(add_text_set(&s, SD_SD3_CLIP_G, g, &err), err);
    OK(add_text_set(&s, SD_SD3_T5, t5, &err), err);
    OK(sd_sd3_require(&s, SD_SD3_MMDIT | SD_SD3_CLIP_L | SD_SD3_CLIP_G | SD_SD3_T5, "x", &err), err);
    check_component(&s.ldm.text1, "sd3/pipelines/sd35/text_encoder/model.safetensors");
    check_component(&s.ldm.text2, "sd3/pipelines/sd35/text_encoder_2/model.safetensors");
    check_component(&s.t5, "sd3/pipelines/sd35/text_encoder_3/model.safetensors");
    check_t5_config(&s.t5_shape);
    rb_st_close(l);
    rb_st_close(g);
    rb_st_close(t5);
    sd_sd3_free(&s);
    rb_st_close(ck);
    free(im);
}

static void test_sd35_built(void **state) {
    (void)state;
    check_sd35("model.diffusion_model.");
    check_sd35(""); /* a diffusion model saved without the prefix */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd3_single_file),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_sd35_built),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
