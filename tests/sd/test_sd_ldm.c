/* Single-file (original LDM) checkpoints seen through diffusers' names,
 * against the fixtures: single_file/sd15.safetensors was written from
 * pipelines/sd15 by diffusers' own conversion script, so every tensor of the
 * diffusers folders must be found under its diffusers name with the same
 * bytes, and the map must be a bijection. The structure read from the names
 * must equal the folder's config. SD 2.x and SDXL single files are built
 * here from the sd21v and sdxl fixture pipelines following
 * tests/data/sd/ldm_names.json, the layout diffusers' conversion scripts gave
 * (tests/sd/gen_ldm_names.py), and must map back the same way. Also: what is
 * not a checkpoint, and checkpoints with missing or inconsistent parts, give
 * clear errors. */
#include "testutil.h"

#include "rbee/safetensors.h"
#include "sd/sd_ldm.h"

/* sd_ldm_build over an open safetensors set. */
static rb_status build(const rb_st_set *ck, sd_ldm *l, rb_error *err) {
    sd_tensor_list tl;
    rb_status s = sd_tensor_list_st(ck, &tl, err);
    if (s == RB_OK) s = sd_ldm_build(&tl, l, err);
    sd_tensor_list_free(&tl); /* the maps hold copies of the entries; the data stays in ck */
    return s;
}

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every tensor of <pipeline>/<component>/<file> maps to one with the same
 * dtype, element count and bytes; returns how many. */
static size_t check_component(const sd_name_map *m, const char *component_file) {
    char path[512];
    rb_st_set *ref = NULL;
    TU_OK(rb_st_open(tu_fixture(path, sizeof path, component_file), &ref, NULL));
    for (int64_t i = 0; i < rb_st_n_tensors(ref); i++) {
        const rb_st_tensor *r = rb_st_tensor_at(ref, i);
        const rb_st_tensor *t = sd_name_map_find(m, r->name);
        if (!t) fail_msg("%s: %s has no tensor in the single file", component_file, r->name);
        assert_int_equal(t->dtype, r->dtype);
        assert_int_equal(t->nbytes, r->nbytes);
        int64_t nr = 1, nt = 1;
        for (int d = 0; d < r->n_dims; d++) nr *= r->ne[d];
        for (int d = 0; d < t->n_dims; d++) nt *= t->ne[d];
        assert_int_equal(nr, nt);
        /* same shape, or [C, C] stored as a 1x1 convolution [C, C, 1, 1] */
        if (t->n_dims == r->n_dims) {
            for (int d = 0; d < r->n_dims; d++) assert_int_equal(t->ne[d], r->ne[d]);
        } else {
            assert_int_equal(r->n_dims, 2);
            assert_int_equal(t->n_dims, 4);
            assert_int_equal(t->ne[0] * t->ne[1], 1);
        }
        if (memcmp(t->data, r->data, r->nbytes) != 0) fail_msg("%s: %s differs", component_file, r->name);
    }
    size_t n = (size_t)rb_st_n_tensors(ref);
    rb_st_close(ref);
    return n;
}

static void test_sd15_single_file(void **state) {
    (void)state;
    char path[512];
    rb_st_set *ck = NULL;
    TU_OK(rb_st_open(tu_fixture(path, sizeof path, "diffusers/single_file/sd15.safetensors"), &ck, NULL));
    sd_ldm l;
    rb_error err;
    TU_OK(build(ck, &l, &err));
    assert_int_equal(l.family, SD_FAMILY_SD1);
    assert_string_equal(sd_family_name(l.family), "sd1");
    /* a bijection: every stored tensor used once, every diffusers tensor found */
    size_t n_unet = check_component(&l.unet, "diffusers/pipelines/sd15/unet/diffusion_pytorch_model.safetensors");
    size_t n_vae = check_component(&l.vae, "diffusers/pipelines/sd15/vae/diffusion_pytorch_model.safetensors");
    size_t n_te = check_component(&l.text1, "diffusers/pipelines/sd15/text_encoder/model.safetensors");
    assert_int_equal(l.unet.n, n_unet);
    assert_int_equal(l.vae.n, n_vae);
    assert_int_equal(l.text1.n, n_te);
    assert_int_equal(l.text2.n, 0);
    assert_int_equal(n_unet + n_vae + n_te, (size_t)rb_st_n_tensors(ck));
    /* the structure the names show = the folder's configs */
    rb_unet_config uc;
    TU_OK(rb_unet_config_load(tu_fixture(path, sizeof path, "diffusers/pipelines/sd15/unet/config.json"), &uc, NULL));
    const sd_ldm_unet_shape *us = &l.unet_shape;
    assert_int_equal(us->n_levels, uc.n_levels);
    assert_int_equal(us->layers_per_block, uc.layers_per_block[0]);
    for (int i = 0; i < uc.n_levels; i++) {
        assert_int_equal(us->channels[i], uc.block_out_channels[i]);
        assert_int_equal(us->attention[i], uc.down_cross_attn[i]);
        assert_int_equal(us->depth[i], uc.down_cross_attn[i] ? uc.transformer_layers[i] : 0);
    }
    assert_int_equal(us->mid_depth, 1);
    assert_int_equal(us->linear_projection, uc.use_linear_projection);
    assert_int_equal(us->in_channels, uc.in_channels);
    assert_int_equal(us->out_channels, uc.out_channels);
    assert_int_equal(us->context_dim, uc.cross_attention_dim);
    assert_int_equal(us->adm_in_channels, 0);
    rb_vae_config vc;
    TU_OK(rb_vae_config_load(tu_fixture(path, sizeof path, "diffusers/pipelines/sd15/vae/config.json"), &vc, NULL));
    assert_int_equal(l.vae_shape.n_levels, vc.n_levels);
    assert_int_equal(l.vae_shape.layers_per_block, vc.layers_per_block);
    for (int i = 0; i < vc.n_levels; i++) assert_int_equal(l.vae_shape.channels[i], vc.block_out_channels[i]);
    assert_int_equal(l.vae_shape.latent_channels, vc.latent_channels);
    assert_true(l.vae_shape.has_encoder);
    rb_clip_text_config tc;
    TU_OK(rb_clip_text_config_load(tu_fixture(path, sizeof path, "diffusers/pipelines/sd15/text_encoder/config.json"),
                                   &tc, NULL));
    assert_true(l.text1_shape.present);
    assert_false(l.text1_shape.open_clip);
    assert_int_equal(l.text1_shape.n_layers, tc.n_layers);
    assert_int_equal(l.text1_shape.hidden, tc.hidden_size);
    assert_int_equal(l.text1_shape.intermediate, tc.intermediate_size);
    assert_int_equal(l.text1_shape.vocab, tc.vocab_size);
    assert_int_equal(l.text1_shape.positions, tc.max_positions);
    assert_int_equal(l.text1_shape.projection, 0);
    sd_ldm_free(&l);
    rb_st_close(ck);
}

/* ---- SD 2.x and SDXL single files in diffusers' own conversion layout ---- */

/* Opens a fixture weights file, following the fixtures' text stubs (a
 * relative path standing for a symbolic link). */
static rb_st_set *open_fixture_weights(const char *pipe, const char *comp) {
    char rel[256], path[1024];
    const char *files[] = {"diffusion_pytorch_model.safetensors", "model.safetensors"};
    for (int f = 0; f < 2; f++) {
        snprintf(rel, sizeof rel, "diffusers/pipelines/%s/%s/config.json", pipe, comp);
        tu_fixture(path, sizeof path, rel);
        char *slash = strrchr(path, '/');
        snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s", files[f]);
        FILE *fp = fopen(path, "rb");
        if (!fp) continue;
        char head[512];
        size_t n = fread(head, 1, sizeof head - 1, fp);
        fclose(fp);
        head[n] = '\0';
        if (n < 511 && strncmp(head, "../", 3) == 0) {
            while (n && (head[n - 1] == '\n' || head[n - 1] == ' ')) head[--n] = '\0';
            char target[2048];
            *strrchr(path, '/') = '\0';
            snprintf(target, sizeof target, "%s/%s", path, head);
            if (strlen(target) >= sizeof path) fail_msg("path too long");
            memcpy(path, target, strlen(target) + 1);
        }
        rb_st_set *s = NULL;
        TU_OK(rb_st_open(path, &s, NULL));
        return s;
    }
    fail_msg("no weights in %s/%s", pipe, comp);
    return NULL;
}

typedef struct comp_set {
    const char *name;
    rb_st_set *st;
} comp_set;

static const rb_st_tensor *source(comp_set *cs, int n, const char *ref) {
    const char *slash = strchr(ref, '/');
    assert_non_null(slash);
    for (int i = 0; i < n; i++)
        if (strlen(cs[i].name) == (size_t)(slash - ref) && strncmp(cs[i].name, ref, (size_t)(slash - ref)) == 0) {
            const rb_st_tensor *t = rb_st_find(cs[i].st, slash + 1);
            if (!t) fail_msg("%s: no such tensor in the fixture", ref);
            return t;
        }
    fail_msg("%s: unknown component", ref);
    return NULL;
}

/* Appends one tensor's header entry and bytes to a growing image. */
typedef struct img_builder {
    char *json;
    size_t jn, jcap;
    uint8_t *data;
    size_t dn, dcap;
} img_builder;

static void ib_add(img_builder *b, const char *name, const char *dtype, const int64_t *shape_torch, int nd,
                   const void *bytes, size_t nbytes) {
    while (b->jn + 512 + strlen(name) > b->jcap) b->json = realloc(b->json, b->jcap = b->jcap * 2 + 4096);
    while (b->dn + nbytes > b->dcap) b->data = realloc(b->data, b->dcap = b->dcap * 2 + nbytes);
    b->jn += (size_t)snprintf(b->json + b->jn, b->jcap - b->jn, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              b->jn > 1 ? "," : "", name, dtype);
    for (int d = 0; d < nd; d++)
        b->jn += (size_t)snprintf(b->json + b->jn, b->jcap - b->jn, "%s%lld", d ? "," : "", (long long)shape_torch[d]);
    b->jn += (size_t)snprintf(b->json + b->jn, b->jcap - b->jn, "],\"data_offsets\":[%zu,%zu]}", b->dn, b->dn + nbytes);
    memcpy(b->data + b->dn, bytes, nbytes);
    b->dn += nbytes;
}

/* One converted tensor of the reference list: its torch shape, dtype and bytes. */
static void build_entry(img_builder *b, json_t *e, comp_set *cs, int ncs, const char *rename_to) {
    const char *name = json_string_value(json_array_get(e, 0)), *op = json_string_value(json_array_get(e, 1));
    const rb_st_tensor *t0 = source(cs, ncs, json_string_value(json_array_get(e, 2)));
    const char *dt = t0->dtype == RB_F32 ? "F32" : t0->dtype == RB_F16 ? "F16" : "BF16";
    int64_t shape[4];
    int nd = t0->n_dims;
    for (int d = 0; d < nd; d++) shape[d] = t0->ne[nd - 1 - d];
    if (rename_to) name = rename_to;
    if (!strcmp(op, "copy")) {
        if (strstr(name, "first_stage_model.") && strstr(name, ".mid.attn_1.") && strstr(name, "weight") && nd == 2) {
            shape[2] = shape[3] = 1; /* 1x1 convolutions, as the script writes them */
            nd = 4;
        }
        ib_add(b, name, dt, shape, nd, t0->data, t0->nbytes);
    } else if (!strcmp(op, "cat")) {
        uint8_t *cat = malloc(3 * t0->nbytes);
        for (int k = 0; k < 3; k++) {
            const rb_st_tensor *tk = source(cs, ncs, json_string_value(json_array_get(e, 2 + (size_t)k)));
            assert_int_equal(tk->nbytes, t0->nbytes);
            memcpy(cat + (size_t)k * t0->nbytes, tk->data, tk->nbytes);
        }
        shape[0] *= 3;
        ib_add(b, name, dt, shape, nd, cat, 3 * t0->nbytes);
        free(cat);
    } else if (!strcmp(op, "transpose")) {
        assert_int_equal(nd, 2);
        const size_t es = t0->nbytes / (size_t)(shape[0] * shape[1]);
        uint8_t *tr = malloc(t0->nbytes);
        const uint8_t *in = t0->data;
        for (int64_t r = 0; r < shape[0]; r++)
            for (int64_t c = 0; c < shape[1]; c++)
                memcpy(tr + (size_t)(c * shape[0] + r) * es, in + (size_t)(r * shape[1] + c) * es, es);
        const int64_t ts[2] = {shape[1], shape[0]};
        ib_add(b, name, dt, ts, 2, tr, t0->nbytes);
        free(tr);
    } else {
        fail_msg("unknown op %s", op);
    }
}

/* sd2: add the OpenCLIP layer diffusers drops; xproj: store SDXL's text
 * projection as real SGM files do (text_projection, applied as x @ P: the
 * transpose of the linear weight) instead of the script's linear form. */
static void check_converted(const char *pipe, const char *const *comps, int ncomp, bool sd2, bool xproj) {
    char path[512];
    size_t len = 0;
    char *text = tu_read_file(tu_data(path, sizeof path, "sd/ldm_names.json"), &len);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    assert_non_null(root);
    json_t *list = json_object_get(json_object_get(root, "pipelines"), pipe);
    assert_true(json_array_size(list) > 100);
    comp_set cs[4];
    for (int i = 0; i < ncomp; i++) cs[i] = (comp_set){comps[i], open_fixture_weights(pipe, comps[i])};
    img_builder b = {.json = malloc(4096), .jn = 1, .jcap = 4096};
    b.json[0] = '{';
    size_t i;
    json_t *e;
    int last_block = -1;
    json_array_foreach(list, i, e) {
        const char *n = json_string_value(json_array_get(e, 0));
        const char *tp = strstr(n, "model.text_projection.weight");
        if (xproj && tp) {
            char renamed[320];
            snprintf(renamed, sizeof renamed, "%.*smodel.text_projection", (int)(tp - n), n);
            json_t *te = json_pack("[s,s,O]", renamed, "transpose", json_array_get(e, 2));
            build_entry(&b, te, cs, ncomp, NULL);
            json_decref(te);
            continue;
        }
        build_entry(&b, e, cs, ncomp, NULL);
        const char *rb = strstr(n, "resblocks.");
        if (rb && atoi(rb + 10) > last_block) last_block = atoi(rb + 10);
    }
    if (sd2) { /* a real SD 2.x file has OpenCLIP's last layer too, which diffusers drops: add one */
        json_array_foreach(list, i, e) {
            const char *n = json_string_value(json_array_get(e, 0));
            char key[64], renamed[320];
            snprintf(key, sizeof key, "resblocks.%d.", last_block);
            const char *at = strstr(n, key);
            if (!at) continue;
            snprintf(renamed, sizeof renamed, "%.*sresblocks.%d.%s", (int)(at - n), n, last_block + 1,
                     at + strlen(key));
            build_entry(&b, e, cs, ncomp, renamed);
        }
    }
    b.json[b.jn++] = '}';
    size_t hl = (b.jn + 7) / 8 * 8, total = 8 + hl + b.dn;
    uint8_t *img = calloc(1, total);
    for (int k = 0; k < 8; k++) img[k] = (uint8_t)(hl >> (8 * k));
    memset(img + 8, ' ', hl);
    memcpy(img + 8, b.json, b.jn);
    memcpy(img + 8 + hl, b.data, b.dn);
    rb_st_set *ck = NULL;
    TU_OK(rb_st_open_memory(img, total, &ck, NULL));
    sd_ldm l;
    rb_error err;
    TU_OK(build(ck, &l, &err));
    assert_int_equal(l.family, sd2 ? SD_FAMILY_SD2 : SD_FAMILY_SDXL);
    for (int c = 0; c < ncomp; c++) {
        const sd_name_map *m = !strcmp(comps[c], "unet")           ? &l.unet
                               : !strcmp(comps[c], "vae")          ? &l.vae
                               : !strcmp(comps[c], "text_encoder") && !sd2 ? &l.text1
                                                                    : &l.text2;
        char file[256];
        snprintf(file, sizeof file, "%s/%s", pipe, comps[c]);
        size_t n = 0;
        for (int64_t k = 0; k < rb_st_n_tensors(cs[c].st); k++) {
            const rb_st_tensor *r = rb_st_tensor_at(cs[c].st, k);
            const rb_st_tensor *t = sd_name_map_find(m, r->name);
            if (!t) fail_msg("%s: %s is not found in the converted file", file, r->name);
            assert_int_equal(t->nbytes, r->nbytes);
            assert_int_equal(t->dtype, r->dtype);
            if (memcmp(t->data, r->data, r->nbytes) != 0) fail_msg("%s: %s differs", file, r->name);
            n++;
        }
        /* the OpenCLIP side may carry extras diffusers' SD 2.x model lacks (its text_projection) */
        if (m->n != n && !(sd2 && m == &l.text2 && m->n == n + 1 && sd_name_map_find(m, "text_projection.weight")))
            fail_msg("%s: %zu mapped tensors for %zu in the folder", file, m->n, n);
    }
    assert_int_equal(l.unet_shape.adm_in_channels, sd2 ? 0 : 68);
    assert_true(l.unet_shape.linear_projection);
    if (!sd2) {
        assert_int_equal(l.unet_shape.depth[2], 2);
        assert_int_equal(l.text2_shape.projection, 20);
    }
    assert_true(l.text2_shape.open_clip);
    sd_ldm_free(&l);
    rb_st_close(ck);
    free(img);
    free(b.json);
    free(b.data);
    for (int c = 0; c < ncomp; c++) rb_st_close(cs[c].st);
    json_decref(root);
}

static void test_sd21v_converted(void **state) {
    (void)state;
    const char *comps[] = {"unet", "vae", "text_encoder"};
    check_converted("sd21v", comps, 3, true, false);
}

static void test_sdxl_converted(void **state) {
    (void)state;
    const char *comps[] = {"unet", "vae", "text_encoder", "text_encoder_2"};
    check_converted("sdxl", comps, 4, false, false);
    check_converted("sdxl", comps, 4, false, true);
}

/* ---- synthetic checkpoints for the error paths ---- */

typedef struct tbuild {
    char json[65536];
    size_t jn;
    float data[4096];
    size_t dn;
} tbuild;

static void tb_add(tbuild *b, const char *name, int nd, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)shape[d];
    assert_true(b->dn + n <= sizeof b->data / sizeof b->data[0]);
    int w = snprintf(b->json + b->jn, sizeof b->json - b->jn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", b->jn > 1 ? "," : "",
                     name);
    b->jn += (size_t)w;
    for (int d = 0; d < nd; d++)
        b->jn += (size_t)snprintf(b->json + b->jn, sizeof b->json - b->jn, "%s%lld", d ? "," : "", (long long)shape[d]);
    b->jn += (size_t)snprintf(b->json + b->jn, sizeof b->json - b->jn, "],\"data_offsets\":[%zu,%zu]}", b->dn * 4,
                              (b->dn + n) * 4);
    for (size_t i = 0; i < n; i++) b->data[b->dn + i] = (float)(b->dn + i);
    b->dn += n;
}

static rb_st_set *tb_open(tbuild *b, uint8_t **img) {
    strcat(b->json, "}");
    b->jn++;
    size_t hl = (b->jn + 7) / 8 * 8;
    size_t total = 8 + hl + b->dn * 4;
    *img = calloc(1, total);
    for (int i = 0; i < 8; i++) (*img)[i] = (uint8_t)(hl >> (8 * i));
    memset(*img + 8, ' ', hl);
    memcpy(*img + 8, b->json, b->jn);
    memcpy(*img + 8 + hl, b->data, b->dn * 4);
    rb_st_set *s = NULL;
    TU_OK(rb_st_open_memory(*img, total, &s, NULL));
    return s;
}

static void tb_init(tbuild *b) {
    memset(b, 0, sizeof *b);
    strcpy(b->json, "{");
    b->jn = 1;
}

/* A minimal but complete SD 1.x-shaped checkpoint: 2 levels, 1 resnet per
 * level (attention at level 0), a 1-level VAE, a 1-layer CLIP. skip: a name
 * to leave out (NULL: none). */
static rb_st_set *tiny_sd1(tbuild *b, uint8_t **img, const char *skip, const char *extra) {
    tb_init(b);
    const int64_t c4[] = {2, 2, 3, 3}, v2[] = {2}, m2[] = {2, 2}, emb[] = {10, 2}, pos[] = {4, 2};
    const char *conv[] = {"model.diffusion_model.input_blocks.0.0.weight",
                          "model.diffusion_model.input_blocks.1.0.in_layers.2.weight",
                          "model.diffusion_model.input_blocks.1.0.out_layers.3.weight",
                          "model.diffusion_model.input_blocks.2.0.op.weight",
                          "model.diffusion_model.input_blocks.3.0.in_layers.2.weight",
                          "model.diffusion_model.input_blocks.3.0.out_layers.3.weight",
                          "model.diffusion_model.out.2.weight",
                          "first_stage_model.decoder.conv_in.weight",
                          "first_stage_model.decoder.up.0.block.0.conv2.weight",
                          "first_stage_model.decoder.up.0.block.1.conv2.weight",
                          "first_stage_model.post_quant_conv.weight"};
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++)
        if (!skip || strcmp(skip, conv[i]) != 0) tb_add(b, conv[i], 4, c4);
    const char *vec[] = {"model.diffusion_model.input_blocks.1.1.norm.weight",
                         "cond_stage_model.transformer.text_model.final_layer_norm.weight"};
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++)
        if (!skip || strcmp(skip, vec[i]) != 0) tb_add(b, vec[i], 1, v2);
    const char *mat[] = {"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight",
                         "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight",
                         "model.diffusion_model.input_blocks.1.1.proj_in.weight",
                         "cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight",
                         "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight"};
    for (size_t i = 0; i < sizeof mat / sizeof mat[0]; i++)
        if (!skip || strcmp(skip, mat[i]) != 0) tb_add(b, mat[i], 2, m2);
    tb_add(b, "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight", 2, emb);
    tb_add(b, "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight", 2, pos);
    if (extra) tb_add(b, extra, 1, v2);
    return tb_open(b, img);
}

static void expect_error(rb_st_set *ck, uint8_t *img, rb_status code, const char *needle) {
    sd_ldm l;
    rb_error err;
    rb_error_clear(&err);
    rb_status s = build(ck, &l, &err);
    if (s != code || !strstr(err.msg, needle))
        fail_msg("expected %s with \"%s\", got %s: %s", rb_status_str(code), needle, rb_status_str(s), err.msg);
    rb_st_close(ck);
    free(img);
}

static void test_tiny_and_errors(void **state) {
    (void)state;
    tbuild *b = malloc(sizeof *b);
    uint8_t *img = NULL;
    rb_st_set *ck = tiny_sd1(b, &img, NULL, NULL);
    sd_ldm l;
    rb_error err;
    TU_OK(build(ck, &l, &err));
    assert_int_equal(l.unet_shape.n_levels, 2);
    assert_int_equal(l.unet_shape.layers_per_block, 1);
    assert_true(l.unet_shape.attention[0]);
    assert_false(l.unet_shape.attention[1]);
    assert_true(l.unet_shape.linear_projection);
    assert_non_null(sd_name_map_find(&l.unet, "down_blocks.0.downsamplers.0.conv.weight"));
    assert_non_null(sd_name_map_find(&l.unet, "down_blocks.1.resnets.0.conv1.weight"));
    assert_non_null(sd_name_map_find(&l.unet, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight"));
    assert_non_null(sd_name_map_find(&l.vae, "decoder.up_blocks.0.resnets.1.conv2.weight"));
    assert_null(sd_name_map_find(&l.unet, "down_blocks.2.resnets.0.conv1.weight"));
    sd_ldm_free(&l);
    rb_st_close(ck);
    free(img);

    /* not a checkpoint */
    tb_init(b);
    const int64_t v2[] = {2};
    tb_add(b, "model.layers.0.weight", 1, v2);
    ck = tb_open(b, &img);
    expect_error(ck, img, RB_E_FORMAT, "not a Stable Diffusion checkpoint");
    /* a UNet without a text encoder */
    tb_init(b);
    tb_add(b, "model.diffusion_model.input_blocks.0.0.weight", 1, v2);
    ck = tb_open(b, &img);
    expect_error(ck, img, RB_E_FORMAT, "no text encoder");
    /* parts missing */
    ck = tiny_sd1(b, &img, "first_stage_model.decoder.up.0.block.0.conv2.weight", NULL);
    expect_error(ck, img, RB_E_FORMAT, "VAE");
    ck = tiny_sd1(b, &img, "model.diffusion_model.input_blocks.3.0.out_layers.3.weight", NULL);
    expect_error(ck, img, RB_E_FORMAT, "down_blocks.1.resnets.0.conv2.weight");
    ck = tiny_sd1(b, &img, "cond_stage_model.transformer.text_model.final_layer_norm.weight", NULL);
    expect_error(ck, img, RB_E_FORMAT, "text encoder");
    ck = tiny_sd1(b, &img, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", NULL);
    expect_error(ck, img, RB_E_FORMAT, "attention without transformer blocks");
    /* block numbering that does not form levels, and unknown parts */
    ck = tiny_sd1(b, &img, NULL, "model.diffusion_model.input_blocks.7.0.in_layers.2.bias");
    expect_error(ck, img, RB_E_FORMAT, "do not form levels");
    ck = tiny_sd1(b, &img, NULL, "model.diffusion_model.middle_block.5.in_layers.0.weight");
    expect_error(ck, img, RB_E_FORMAT, "unexpected tensor name");
    ck = tiny_sd1(b, &img, NULL, "first_stage_model.decoder.up.0.blocks.0.conv1.weight");
    expect_error(ck, img, RB_E_FORMAT, "unexpected tensor name");
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd15_single_file),
        cmocka_unit_test(test_sd21v_converted),
        cmocka_unit_test(test_sdxl_converted),
        cmocka_unit_test(test_tiny_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
