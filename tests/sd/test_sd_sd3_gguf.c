/* SD3 in rbee's SD GGUF files (src/sd/sd_sd3_gguf*, sd_sd3_convert.c): the
 * tiny sd3 single file (tests/data/sd3/single_file, the pipelines/sd3 folder
 * in the original layout) converted with the folder's configs and read back.
 * f16: every tensor of the folder's transformer, VAE and three text
 * encoders comes back under its diffusers name with exactly the folder's
 * values. q8_0 / q4_0: each linear weight whose rows are whole blocks comes
 * back as the bytes the engine's quantizer (rb_quantize_rows) gives for the
 * folder's values (the fused q/k/v and the swapped modulations quantized
 * as a whole give the same rows), stays quantized when bound for a network, and
 * everything else comes back exact. The rbee.sd3.* configs equal the
 * folder's config.json values; files whose keys disagree with the tensors,
 * lack them, are not SD3 or are truncated give errors. */
#include "testutil.h"

#include "rbee/backend.h"
#include "rbee/quant.h"
#include "rbee/safetensors.h"
#include "sd/sd_convert.h"
#include "sd/sd_sd3_gguf.h"
#include "sd3_single_ref.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define OK(expr, err)                                                                                                 \
    do {                                                                                                              \
        rb_status s_ = (expr);                                                                                        \
        if (s_ != RB_OK) fail_msg("%s -> %s: %s", #expr, rb_status_str(s_), (err).msg);                               \
    } while (0)

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(g_tmp, sizeof g_tmp, "rbee_sd3g_");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(g_tmp);
}

static const char *data(char *buf, size_t len, const char *rel) { return tu_data(buf, len, rel); }

/* through `rbee convert`'s entry (sd_convert_to_gguf), which must hand an SD3
 * single file to the SD3 converter */
static void convert(rb_dtype type, const char *out, bool with_config, rb_convert_stats *stats) {
    char in[512], cfg[512];
    rb_convert_opts o = {.type = type};
    rb_error err = {0};
    OK(sd_convert_to_gguf(data(in, sizeof in, "sd3/single_file/sd3.safetensors"), out, &o,
                              with_config ? data(cfg, sizeof cfg, "sd3/pipelines/sd3") : NULL, stats, &err),
       err);
}

static float *decode(const rb_st_tensor *t, int64_t *n) {
    *n = 1;
    for (int d = 0; d < t->n_dims; d++) *n *= t->ne[d];
    float *x = malloc((size_t)*n * sizeof *x + 1);
    assert_non_null(x);
    assert_int_equal(rb_dequantize_row(t->dtype, t->data, x, *n), RB_OK);
    return x;
}

/* Each folder tensor against the file's; q: the block type the file was
 * written with (RB_F16: none). Returns how many came back quantized. */
static int check_part(const sd_sd3_gguf *f, sd_sd3_part part, const char *rel, rb_dtype q) {
    char p[512];
    rb_st_set *ref = NULL;
    rb_error err = {0};
    OK(rb_st_open(data(p, sizeof p, rel), &ref, &err), err);
    const sd_name_map *m = sd_sd3_part_map(&f->sd3, part);
    assert_non_null(m);
    int n_q = 0;
    for (int64_t i = 0; i < rb_st_n_tensors(ref); i++) {
        const rb_st_tensor *r = rb_st_tensor_at(ref, i);
        const rb_st_tensor *t = sd_name_map_find(m, r->name);
        if (!t) fail_msg("%s: %s is not in the GGUF file's map", rel, r->name);
        int64_t nr = 0, nt = 0;
        float *rv = decode(r, &nr);
        const bool qz = q != RB_F16;
        const int64_t blk = qz ? rb_dtype_info((int)q)->block_size : 1;
        if (t->dtype != RB_F16 && t->dtype != RB_F32) {
            /* a linear weight with rows of whole blocks: the quantizer's bytes */
            assert_int_equal(t->dtype, q);
            assert_int_equal(r->n_dims, 2);
            assert_int_equal(t->ne[0], r->ne[0]);
            assert_int_equal(t->ne[1], r->ne[1]);
            assert_int_equal(r->ne[0] % blk, 0);
            const size_t nb = rb_dtype_row_size(q, r->ne[0]) * (size_t)r->ne[1];
            assert_int_equal(t->nbytes, nb);
            void *want = malloc(nb);
            assert_non_null(want);
            assert_int_equal(rb_quantize_rows(q, rv, want, r->ne[1], r->ne[0]), RB_OK);
            if (memcmp(want, t->data, nb) != 0) fail_msg("%s: %s differs from %s of the folder's values", rel, r->name, rb_dtype_name(q));
            free(want);
            n_q++;
        } else {
            float *tv = decode(t, &nt);
            assert_int_equal(nt, nr);
            if (memcmp(tv, rv, (size_t)nr * sizeof *rv) != 0) fail_msg("%s: %s differs", rel, r->name);
            free(tv);
            /* quantized: only what must not be stays a float type (the
             * VAE's attention matrices are 1x1 convolutions in the original
             * layout, kept in f16 as the SD converter keeps them) */
            const bool emb = strstr(r->name, "token_embedding") || !strcmp(r->name, "shared.weight") ||
                             strstr(r->name, "relative_attention_bias");
            if (qz && part != SD_SD3_VAE && r->n_dims == 2 && r->ne[0] % blk == 0 && !emb)
                fail_msg("%s: %s (rows of %lld) was not quantized", rel, r->name, (long long)r->ne[0]);
        }
        free(rv);
    }
    assert_int_equal((int64_t)m->n, rb_st_n_tensors(ref));
    rb_st_close(ref);
    return n_q;
}

static int64_t cfg_int(const char *rel, const char *key) {
    char p[512];
    json_error_t je;
    json_t *j = json_load_file(data(p, sizeof p, rel), 0, &je);
    if (!j) fail_msg("%s: %s", rel, je.text);
    const json_t *v = json_object_get(j, key);
    if (!json_is_integer(v)) fail_msg("%s: %s", rel, key);
    const int64_t x = (int64_t)json_integer_value(v);
    json_decref(j);
    return x;
}

static int check_file(const char *path, rb_dtype q) {
    sd_sd3_gguf *f = NULL;
    rb_error err = {0};
    OK(sd_sd3_gguf_open(path, &f, &err), err);
    assert_int_equal(f->sd3.present, SD_SD3_MMDIT | SD_SD3_VAE | SD_SD3_CLIP_L | SD_SD3_CLIP_G | SD_SD3_T5);
    int n_q = check_part(f, SD_SD3_MMDIT, "sd3/pipelines/sd3/transformer/diffusion_pytorch_model.safetensors", q);
    n_q += check_part(f, SD_SD3_VAE, "sd3/pipelines/sd3/vae/diffusion_pytorch_model.safetensors", q);
    n_q += check_part(f, SD_SD3_CLIP_L, "sd3/pipelines/sd3/text_encoder/model.safetensors", q);
    n_q += check_part(f, SD_SD3_CLIP_G, "sd3/pipelines/sd3/text_encoder_2/model.safetensors", q);
    n_q += check_part(f, SD_SD3_T5, "sd3/pipelines/sd3/text_encoder_3/model.safetensors", q);
    /* the configs the tensors cannot show, from the folder */
    const char *tc = "sd3/pipelines/sd3/transformer/config.json";
    assert_int_equal(f->meta.mmdit_heads, cfg_int(tc, "num_attention_heads"));
    assert_int_equal(f->meta.mmdit_head_dim, cfg_int(tc, "attention_head_dim"));
    assert_int_equal(f->meta.sample_size, cfg_int(tc, "sample_size"));
    assert_int_equal(f->meta.t5_max_distance,
                     cfg_int("sd3/pipelines/sd3/text_encoder_3/config.json", "relative_attention_max_distance"));
    assert_int_equal(f->meta.clip_heads[0], cfg_int("sd3/pipelines/sd3/text_encoder/config.json", "num_attention_heads"));
    assert_int_equal(f->meta.clip_heads[1],
                     cfg_int("sd3/pipelines/sd3/text_encoder_2/config.json", "num_attention_heads"));
    assert_int_equal(f->sd3.mmdit_shape.num_layers, cfg_int(tc, "num_layers"));
    /* bound for a network: a quantized weight stays quantized, a modulation
     * with swapped halves too, and weights keep the file alive */
    rb_backend *be = NULL;
    OK(rb_backend_create("cpu", NULL, &be, &err), err);
    sd_weights ws;
    OK(sd_sd3_gguf_weights(f, SD_SD3_MMDIT, be, NULL, &ws, &err), err);
    sd_sd3_gguf_unref(f); /* the weights hold a reference */
    static const char *const names[] = {"transformer_blocks.0.attn.add_v_proj.weight", "norm_out.linear.weight",
                                        "transformer_blocks.1.norm1_context.linear.weight"};
    const int64_t rows[] = {32, 64, 64};
    for (int k = 0; k < 3; k++) {
        rb_tensor t;
        const int64_t ne[2] = {32, rows[k]};
        OK(sd_weights_get(&ws, names[k], SD_W_MAT, 2, ne, true, &t, NULL, &err), err);
        assert_int_equal(t.dtype, q == RB_F16 ? RB_F32 : q);
    }
    sd_weights_close(&ws);
    rb_backend_destroy(be);
    return n_q;
}

static void test_f16(void **state) {
    (void)state;
    char out[512];
    snprintf(out, sizeof out, "%s/sd3-f16.gguf", g_tmp);
    rb_convert_stats st;
    convert(RB_F16, out, true, &st);
    assert_int_equal(check_file(out, RB_F16), 0);
    assert_true(st.n_tensors > 300);
    assert_int_equal(st.n_fallback, 0);
}

static void test_q8_0(void **state) {
    (void)state;
    char out[512];
    snprintf(out, sizeof out, "%s/sd3-q8_0.gguf", g_tmp);
    rb_convert_stats st;
    convert(RB_Q8_0, out, true, &st);
    const int n_q = check_file(out, RB_Q8_0);
    /* folder tensors back in q8_0: the MMDiT's 25 block matrices (the fused
     * q/k/v give six, the last block has no context output or MLP) and 6 of
     * its 7 embedder / output matrices (y_embedder's input is 20 wide), and
     * T5's q, k, v, o, wi_0, wi_1 of both blocks (wo's rows are 48 wide);
     * the CLIP encoders (8 and 12 wide) have none */
    assert_int_equal(n_q, 31 + 12);
    /* stored: 10 + 7 block matrices and 6 outside in the MMDiT, 12 in T5 */
    assert_int_equal(st.n_quantized, 23 + 12);
    assert_int_equal(st.n_quantized + st.n_fallback, 64); /* the file's 2-D linear weights */
}

/* q4_0 (blocks of 32 too): the same tensors quantized, as the engine's
 * q4_0 quantizer gives them */
static void test_q4_0(void **state) {
    (void)state;
    char out[512];
    snprintf(out, sizeof out, "%s/sd3-q4_0.gguf", g_tmp);
    rb_convert_stats st;
    convert(RB_Q4_0, out, true, &st);
    assert_int_equal(check_file(out, RB_Q4_0), 31 + 12);
    assert_int_equal(st.n_quantized, 23 + 12);
}

static void expect_open_error(const char *path, const char *part);

/* SD3.5's options (qk-norm, a dual-attention block with its 9-way
 * modulation): the sd35 MMDiT in the original layout, alone in a file,
 * converted to q8_0 without a config folder (its heads follow from the
 * qk-norm's size) */
static void test_sd35_q8_0(void **state) {
    (void)state;
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/sd35.safetensors", g_tmp);
    snprintf(out, sizeof out, "%s/sd35-q8_0.gguf", g_tmp);
    size_t n = 0;
    uint8_t *im = sd35_original("model.diffusion_model.", &n);
    FILE *fp = fopen(in, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(im, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    free(im);
    rb_convert_opts o = {.type = RB_Q8_0};
    rb_error err = {0};
    OK(sd_convert_to_gguf(in, out, &o, NULL, NULL, &err), err);
    sd_sd3_gguf *f = NULL;
    OK(sd_sd3_gguf_open(out, &f, &err), err);
    assert_int_equal(f->sd3.present, SD_SD3_MMDIT);
    /* 3 blocks: 3 x (6 q/k/v + to_out + norm1 + norm1_context + 2 ff) + 2 x (to_add_out + 2 ff_context)
     * + the dual block's 3 attn2 q/k/v and to_out, and 6 of the 7 outer matrices */
    assert_int_equal(check_part(f, SD_SD3_MMDIT, "sd3/pipelines/sd35/transformer/diffusion_pytorch_model.safetensors",
                                RB_Q8_0),
                     3 * 11 + 2 * 3 + 4 + 6);
    const char *tc = "sd3/pipelines/sd35/transformer/config.json";
    assert_int_equal(f->meta.mmdit_heads, cfg_int(tc, "num_attention_heads"));
    assert_int_equal(f->meta.mmdit_head_dim, cfg_int(tc, "attention_head_dim"));
    assert_int_equal(f->meta.sample_size, 128); /* not in the tensors: the published models' */
    assert_true(f->sd3.mmdit_shape.qk_norm);
    assert_int_equal(f->sd3.mmdit_shape.n_dual, 1);
    assert_int_equal(f->sd3.mmdit_shape.dual_attention_layers[0], 0);
    /* the MMDiT saved without "model.diffusion_model.": the same file */
    char bare_in[512], bare_out[512];
    snprintf(bare_in, sizeof bare_in, "%s/sd35-bare.safetensors", g_tmp);
    snprintf(bare_out, sizeof bare_out, "%s/sd35-bare-q8_0.gguf", g_tmp);
    im = sd35_original("", &n);
    fp = fopen(bare_in, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(im, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    free(im);
    OK(sd_convert_to_gguf(bare_in, bare_out, &o, NULL, NULL, &err), err);
    /* general.name differs (the input's name); the tensors do not */
    rb_gguf *g1 = NULL, *g2 = NULL;
    OK(rb_gguf_open(out, &g1, &err), err);
    OK(rb_gguf_open(bare_out, &g2, &err), err);
    assert_int_equal(rb_gguf_n_tensors(g1), rb_gguf_n_tensors(g2));
    for (int64_t i = 0; i < rb_gguf_n_tensors(g1); i++) {
        const rb_gguf_tensor_info *t1 = rb_gguf_tensor_at(g1, i), *t2 = rb_gguf_tensor_at(g2, i);
        assert_int_equal(t1->name.len, t2->name.len);
        assert_memory_equal(t1->name.ptr, t2->name.ptr, t1->name.len);
        assert_int_equal(t1->nbytes, t2->nbytes);
        assert_memory_equal(t1->data, t2->data, t1->nbytes);
    }
    rb_gguf_close(g1);
    rb_gguf_close(g2);
    /* the same as ComfyUI-GGUF lays SD3.5 out: no rbee.sd3.* keys, names
     * without "model.diffusion_model.", and a quantized tensor whose rows
     * are not whole blocks (y_embedder's 20-wide input) stored as one flat
     * run with its torch shape in comfy.gguf.orig_shape.* */
    char comfy[512], ref_path[512];
    snprintf(comfy, sizeof comfy, "%s/sd35-comfy.gguf", g_tmp);
    rb_st_set *ref = NULL;
    OK(rb_st_open(data(ref_path, sizeof ref_path, "sd3/pipelines/sd35/transformer/diffusion_pytorch_model.safetensors"),
                  &ref, &err),
       err);
    int64_t ny = 0;
    float *yv = decode(rb_st_find(ref, "time_text_embed.text_embedder.linear_1.weight"), &ny);
    assert_int_equal(ny, 640);
    uint8_t yq[1024];
    assert_true(rb_dtype_row_size(RB_Q8_0, ny) <= sizeof yq);
    assert_int_equal(rb_quantize_row(RB_Q8_0, yv, yq, ny), RB_OK);
    rb_gguf_writer *w = NULL;
    OK(rb_gguf_writer_create(&w, &err), err);
    assert_int_equal(rb_gguf_writer_set_str(w, "general.architecture", "sd3"), RB_OK);
    const int32_t torch_shape[2] = {32, 20};
    assert_int_equal(rb_gguf_writer_set_arr(w, "comfy.gguf.orig_shape.y_embedder.mlp.0.weight", RB_GGUF_INT32,
                                            torch_shape, 2),
                     RB_OK);
    for (int64_t i = 0; i < rb_gguf_n_tensors(f->g); i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(f->g, i);
        const char *name = f->list.t[i].name + strlen("model.diffusion_model.");
        if (!strcmp(name, "y_embedder.mlp.0.weight")) {
            const int64_t flat[1] = {ny};
            assert_int_equal(rb_gguf_writer_add_tensor(w, name, RB_Q8_0, 1, flat, yq, rb_dtype_row_size(RB_Q8_0, ny)),
                             RB_OK);
            continue;
        }
        assert_int_equal(rb_gguf_writer_add_tensor(w, name, ti->dtype, ti->n_dims, ti->ne, ti->data, ti->nbytes),
                         RB_OK);
    }
    OK(rb_gguf_writer_write(w, comfy, 0, &err), err);
    rb_gguf_writer_free(w);
    sd_sd3_gguf *c = NULL;
    OK(sd_sd3_gguf_open(comfy, &c, &err), err);
    assert_int_equal(c->meta.mmdit_heads, 4); /* from the qk-norm's size */
    assert_int_equal(c->meta.mmdit_head_dim, 8);
    const rb_st_tensor *y = sd_name_map_find(&c->sd3.mmdit, "time_text_embed.text_embedder.linear_1.weight");
    assert_non_null(y);
    assert_int_equal(y->dtype, RB_F32);
    assert_int_equal(y->ne[0], 20);
    assert_int_equal(y->ne[1], 32);
    float want[640];
    assert_int_equal(rb_dequantize_row(RB_Q8_0, yq, want, ny), RB_OK);
    assert_memory_equal(y->data, want, sizeof want);
    const rb_st_tensor *q1 = sd_name_map_find(&c->sd3.mmdit, "transformer_blocks.2.attn.add_k_proj.weight");
    const rb_st_tensor *q0 = sd_name_map_find(&f->sd3.mmdit, "transformer_blocks.2.attn.add_k_proj.weight");
    assert_non_null(q1);
    assert_non_null(q0);
    assert_int_equal(q1->dtype, RB_Q8_0);
    assert_int_equal(q1->nbytes, q0->nbytes);
    assert_memory_equal(q1->data, q0->data, q0->nbytes);
    sd_sd3_gguf_unref(c);
    /* a malformed shape key */
    OK(rb_gguf_writer_create(&w, &err), err);
    assert_int_equal(rb_gguf_writer_set_str(w, "general.architecture", "sd3"), RB_OK);
    const int32_t wrong[2] = {32, 21};
    assert_int_equal(rb_gguf_writer_set_arr(w, "comfy.gguf.orig_shape.y_embedder.mlp.0.weight", RB_GGUF_INT32, wrong,
                                            2),
                     RB_OK);
    const int64_t flat[1] = {ny};
    assert_int_equal(rb_gguf_writer_add_tensor(w, "y_embedder.mlp.0.weight", RB_Q8_0, 1, flat, yq,
                                               rb_dtype_row_size(RB_Q8_0, ny)),
                     RB_OK);
    OK(rb_gguf_writer_write(w, comfy, 0, &err), err);
    rb_gguf_writer_free(w);
    expect_open_error(comfy, "comfy.gguf.orig_shape.y_embedder.mlp.0.weight has 672 elements");
    free(yv);
    rb_st_close(ref);
    sd_sd3_gguf_unref(f);
}

/* The diffusers folders themselves: pipelines/sd3 converted to f16 gives the
 * same file content as its single file (tensor by tensor: names, shapes,
 * dtypes, bytes) and so the folder's values; q8_0 as the quantizer gives;
 * pipelines/sd35 (qk-norm, dual attention) back tensor by tensor */
static void test_folders(void **state) {
    (void)state;
    char dir[512], a[512], b[512];
    rb_convert_opts o = {.type = RB_F16};
    rb_error err = {0};
    snprintf(a, sizeof a, "%s/sd3-folder-f16.gguf", g_tmp);
    snprintf(b, sizeof b, "%s/sd3-single-f16.gguf", g_tmp);
    OK(sd_convert_to_gguf(data(dir, sizeof dir, "sd3/pipelines/sd3"), a, &o, NULL, NULL, &err), err);
    convert(RB_F16, b, true, NULL);
    assert_int_equal(check_file(a, RB_F16), 0);
    rb_gguf *ga = NULL, *gb = NULL;
    OK(rb_gguf_open(a, &ga, &err), err);
    OK(rb_gguf_open(b, &gb, &err), err);
    assert_int_equal(rb_gguf_n_tensors(ga), rb_gguf_n_tensors(gb));
    for (int64_t i = 0; i < rb_gguf_n_tensors(gb); i++) {
        const rb_gguf_tensor_info *tb = rb_gguf_tensor_at(gb, i);
        char name[400];
        snprintf(name, sizeof name, "%.*s", (int)tb->name.len, tb->name.ptr);
        const rb_gguf_tensor_info *ta = rb_gguf_find_tensor(ga, name);
        if (!ta) fail_msg("%s: not in the folder's conversion", name);
        assert_int_equal(ta->dtype, tb->dtype);
        assert_int_equal(ta->n_dims, tb->n_dims);
        assert_memory_equal(ta->ne, tb->ne, sizeof ta->ne);
        assert_int_equal(ta->nbytes, tb->nbytes);
        if (memcmp(ta->data, tb->data, ta->nbytes) != 0) fail_msg("%s differs", name);
    }
    rb_gguf_close(ga);
    rb_gguf_close(gb);
    o.type = RB_Q8_0;
    snprintf(a, sizeof a, "%s/sd3-folder-q8_0.gguf", g_tmp);
    OK(sd_convert_to_gguf(dir, a, &o, NULL, NULL, &err), err);
    assert_int_equal(check_file(a, RB_Q8_0), 31 + 12);
    snprintf(a, sizeof a, "%s/sd35-folder-q8_0.gguf", g_tmp);
    OK(sd_convert_to_gguf(data(dir, sizeof dir, "sd3/pipelines/sd35"), a, &o, NULL, NULL, &err), err);
    sd_sd3_gguf *f = NULL;
    OK(sd_sd3_gguf_open(a, &f, &err), err);
    assert_int_equal(check_part(f, SD_SD3_MMDIT, "sd3/pipelines/sd35/transformer/diffusion_pytorch_model.safetensors",
                                RB_Q8_0),
                     3 * 11 + 2 * 3 + 4 + 6);
    assert_int_equal(f->meta.mmdit_heads, 4);
    assert_int_equal(f->meta.sample_size, cfg_int("sd3/pipelines/sd35/transformer/config.json", "sample_size"));
    sd_sd3_gguf_unref(f);
    /* a configs folder is for single files only */
    assert_int_equal(sd_convert_to_gguf(dir, a, &o, dir, NULL, &err), RB_E_INVALID);
    /* a folder holding only a transformer, with a tensor an MMDiT has not,
     * then with a k projection missing */
    char bad[512], file[600], cfg_src[512];
    snprintf(bad, sizeof bad, "%s/badpipe", g_tmp);
    snprintf(file, sizeof file, "%s/transformer", bad);
    assert_int_equal(mkdir(bad, 0755), 0);
    assert_int_equal(mkdir(file, 0755), 0);
    size_t cn = 0;
    char *cfg_text = tu_read_file(data(cfg_src, sizeof cfg_src, "sd3/pipelines/sd3/transformer/config.json"), &cn);
    snprintf(file, sizeof file, "%s/transformer/config.json", bad);
    FILE *fp = fopen(file, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(cfg_text, 1, cn, fp), cn);
    assert_int_equal(fclose(fp), 0);
    free(cfg_text);
    rb_st_set *ref = NULL;
    OK(rb_st_open(data(cfg_src, sizeof cfg_src, "sd3/pipelines/sd3/transformer/diffusion_pytorch_model.safetensors"),
                  &ref, &err),
       err);
    for (int variant = 0; variant < 2; variant++) {
        img im = img_new();
        for (int64_t i = 0; i < rb_st_n_tensors(ref); i++) {
            const rb_st_tensor *t = rb_st_tensor_at(ref, i);
            if (variant == 1 && !strcmp(t->name, "transformer_blocks.1.attn.add_k_proj.weight")) continue;
            img_add(&im, t->name, t->dtype, t->n_dims, t->ne, t->data, t->nbytes);
            if (variant == 0 && !strcmp(t->name, "proj_out.bias"))
                img_add(&im, "transformer_blocks.0.attn.to_gate.weight", t->dtype, t->n_dims, t->ne, t->data, t->nbytes);
        }
        size_t n = 0;
        uint8_t *bytes = img_finish(&im, &n);
        snprintf(file, sizeof file, "%s/transformer/diffusion_pytorch_model.safetensors", bad);
        fp = fopen(file, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(bytes, 1, n, fp), n);
        assert_int_equal(fclose(fp), 0);
        free(bytes);
        assert_int_equal(sd_convert_to_gguf(bad, a, &o, NULL, NULL, &err), RB_E_FORMAT);
        assert_non_null(strstr(err.msg, variant == 0 ? "transformer: tensor 'transformer_blocks.0.attn.to_gate.weight' "
                                                       "is not part of an SD3 MMDiT"
                                                     : "transformer_blocks.1.attn.add_k_proj.weight is missing"));
    }
    rb_st_close(ref);
}

/* A file with the tensors of src and the keys of s and m (arch: its
 * general.architecture; keys false: no rbee.sd3.* keys). */
static void write_variant(const sd_sd3_gguf *src, const char *arch, const sd_sd3 *s, const sd_sd3_meta *m, bool keys,
                          const char *path) {
    rb_gguf_writer *w = NULL;
    rb_error err = {0};
    OK(rb_gguf_writer_create(&w, &err), err);
    assert_int_equal(rb_gguf_writer_set_str(w, "general.architecture", arch), RB_OK);
    if (keys) OK(sd_sd3_meta_write(w, s, m, &err), err);
    for (int64_t i = 0; i < rb_gguf_n_tensors(src->g); i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(src->g, i);
        assert_int_equal(rb_gguf_writer_add_tensor(w, src->list.t[i].name, ti->dtype, ti->n_dims, ti->ne, ti->data,
                                                   ti->nbytes),
                         RB_OK);
    }
    OK(rb_gguf_writer_write(w, path, 0, &err), err);
    rb_gguf_writer_free(w);
}

static void expect_open_status(const char *path, rb_status want, const char *part) {
    sd_sd3_gguf *f = NULL;
    rb_error err = {0};
    const rb_status got = sd_sd3_gguf_open(path, &f, &err);
    if (got != want) fail_msg("%s: %s, not %s (%s)", path, rb_status_str(got), rb_status_str(want), err.msg);
    assert_null(f);
    if (!strstr(err.msg, part)) fail_msg("message \"%s\" does not say \"%s\"", err.msg, part);
}

static void expect_open_error(const char *path, const char *part) { expect_open_status(path, RB_E_FORMAT, part); }

static void test_bad_files(void **state) {
    (void)state;
    char good[512], bad[512], in[512];
    snprintf(good, sizeof good, "%s/sd3-good.gguf", g_tmp);
    snprintf(bad, sizeof bad, "%s/sd3-bad.gguf", g_tmp);
    convert(RB_F16, good, true, NULL);
    sd_sd3_gguf *f = NULL;
    rb_error err = {0};
    OK(sd_sd3_gguf_open(good, &f, &err), err);
    /* the same keys written again: opens */
    write_variant(f, "sd3", &f->sd3, &f->meta, true, bad);
    sd_sd3_gguf *g = NULL;
    OK(sd_sd3_gguf_open(bad, &g, &err), err);
    sd_sd3_gguf_unref(g);
    /* keys that disagree with the tensors */
    sd_sd3 s = f->sd3;
    s.mmdit_shape.num_layers = 3;
    write_variant(f, "sd3", &s, &f->meta, true, bad);
    expect_open_error(bad, "rbee.sd3.transformer.num_layers is 3 but the tensors show 2");
    s = f->sd3;
    s.mmdit_shape.qk_norm = true;
    write_variant(f, "sd3", &s, &f->meta, true, bad);
    expect_open_error(bad, "qk_norm");
    s = f->sd3;
    s.t5_shape.d_kv = 4;
    write_variant(f, "sd3", &s, &f->meta, true, bad);
    expect_open_error(bad, "rbee.sd3.text_encoder_3.d_kv is 4 but the tensors show 8");
    s = f->sd3;
    s.mmdit_shape.n_dual = 1;
    write_variant(f, "sd3", &s, &f->meta, true, bad);
    expect_open_error(bad, "dual_attention_layers");
    sd_sd3_meta m = f->meta;
    m.mmdit_heads = 2;
    write_variant(f, "sd3", &f->sd3, &m, true, bad);
    expect_open_error(bad, "2 heads of 8 do not fit the tensors' width 32");
    m = f->meta;
    m.clip_heads[1] = 5;
    write_variant(f, "sd3", &f->sd3, &m, true, bad);
    expect_open_error(bad, "5 heads do not divide the width 12");
    /* no keys (as ComfyUI-GGUF writes SD3): the tiny model's heads cannot be
     * derived (32 wide, no qk-norm); another architecture */
    write_variant(f, "sd3", &f->sd3, &f->meta, false, bad);
    expect_open_status(bad, RB_E_UNSUPPORTED, "the file carries no rbee.sd3.* configs and the MMDiT's heads are not "
                                              "known");
    write_variant(f, "sd1", &f->sd3, &f->meta, true, bad);
    expect_open_error(bad, "not an SD3 GGUF file");
    sd_sd3_gguf_unref(f);
    /* truncated: an error, never a crash */
    size_t n = 0;
    uint8_t *whole = tu_read_file(good, &n);
    const size_t cuts[] = {0, 4, 24, 200, n / 2, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        sd_sd3_gguf *t = NULL;
        if (sd_sd3_gguf_open_memory(whole, cuts[k], &t, &err) == RB_OK) fail_msg("a file cut at %zu opened", cuts[k]);
        assert_null(t);
    }
    free(whole);
    /* without the folder's configs the tiny model's heads are unknown (32 wide, no qk-norm) */
    rb_convert_opts o = {.type = RB_F16};
    assert_int_equal(sd_sd3_convert_to_gguf(data(in, sizeof in, "sd3/single_file/sd3.safetensors"), bad, &o, NULL,
                                            NULL, &err),
                     RB_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "the MMDiT's heads are not known"));
    /* not SD3 */
    assert_int_equal(sd_sd3_convert_to_gguf(data(in, sizeof in, "sd3/pipelines/sd3/vae/diffusion_pytorch_model.safetensors"),
                                            bad, &o, NULL, NULL, &err),
                     RB_E_FORMAT);
    assert_non_null(strstr(err.msg, "not an SD3 checkpoint"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_sd35_q8_0),
        cmocka_unit_test(test_folders),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
