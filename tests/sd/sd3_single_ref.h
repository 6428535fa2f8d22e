/* Test helpers shared by the SD3 weight-name tests: building a safetensors
 * image in memory, and the tiny SD3.5 MMDiT of tests/data/sd3/pipelines/sd35
 * written in the original single-file layout by the inverse of diffusers'
 * conversion (written here independently of src/sd/sd_sd3_mmdit.c: q/k/v
 * concatenated, the last block's context adaLN and the final layer's
 * modulation with their halves swapped). Include after testutil.h. */
#ifndef RBEE_TEST_SD3_SINGLE_REF_H
#define RBEE_TEST_SD3_SINGLE_REF_H

#include "rbee/safetensors.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct img {
    char *json;
    size_t jn, jcap;
    uint8_t *data;
    size_t dn, dcap;
} img;

static inline void img_add(img *b, const char *name, rb_dtype dt, int nd, const int64_t *ne, const void *bytes, size_t nbytes) {
    while (b->jn + 512 + strlen(name) > b->jcap) b->json = realloc(b->json, b->jcap = b->jcap * 2 + 4096);
    while (b->dn + nbytes > b->dcap) b->data = realloc(b->data, b->dcap = b->dcap * 2 + nbytes + 64);
    assert_non_null(b->json);
    assert_non_null(b->data);
    const char *ds = dt == RB_F32 ? "F32" : dt == RB_F16 ? "F16" : "BF16";
    b->jn += (size_t)snprintf(b->json + b->jn, b->jcap - b->jn, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              b->jn > 1 ? "," : "", name, ds);
    for (int d = nd - 1; d >= 0; d--) /* torch order */
        b->jn += (size_t)snprintf(b->json + b->jn, b->jcap - b->jn, "%s%lld", d == nd - 1 ? "" : ",", (long long)ne[d]);
    b->jn += (size_t)snprintf(b->json + b->jn, b->jcap - b->jn, "],\"data_offsets\":[%zu,%zu]}", b->dn, b->dn + nbytes);
    if (nbytes) memcpy(b->data + b->dn, bytes, nbytes);
    b->dn += nbytes;
}

/* The safetensors image (caller frees); *size set. */
static inline uint8_t *img_finish(img *b, size_t *size) {
    b->json[b->jn++] = '}';
    const size_t hl = (b->jn + 7) / 8 * 8, total = 8 + hl + b->dn;
    uint8_t *out = calloc(1, total);
    assert_non_null(out);
    for (int k = 0; k < 8; k++) out[k] = (uint8_t)(hl >> (8 * k));
    memset(out + 8, ' ', hl);
    memcpy(out + 8, b->json, b->jn);
    memcpy(out + 8 + hl, b->data, b->dn);
    free(b->json);
    free(b->data);
    memset(b, 0, sizeof *b);
    *size = total;
    return out;
}

static inline img img_new(void) {
    img b = {.json = malloc(4096), .jn = 1, .jcap = 4096};
    assert_non_null(b.json);
    b.json[0] = '{';
    return b;
}

/* Writes the original name of one diffusers MMDiT tensor and how to store
 * it: 0 copy, 1 first of a q/k/v triple (concatenate with k, v), 2 swap the
 * halves, -1 skip (k / v: part of the triple). */
static inline int original_name(const char *d, int last, char *out, size_t len, char *k_name, char *v_name) {
    static const struct { const char *d, *o; } top[] = {
        {"pos_embed.proj.", "x_embedder.proj."},
        {"time_text_embed.timestep_embedder.linear_1.", "t_embedder.mlp.0."},
        {"time_text_embed.timestep_embedder.linear_2.", "t_embedder.mlp.2."},
        {"time_text_embed.text_embedder.linear_1.", "y_embedder.mlp.0."},
        {"time_text_embed.text_embedder.linear_2.", "y_embedder.mlp.2."},
        {"context_embedder.", "context_embedder."},
        {"proj_out.", "final_layer.linear."},
        {"norm_out.linear.", "final_layer.adaLN_modulation.1."},
    };
    if (!strcmp(d, "pos_embed.pos_embed")) return snprintf(out, len, "pos_embed"), 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strncmp(d, top[i].d, strlen(top[i].d)))
            return snprintf(out, len, "%s%s", top[i].o, d + strlen(top[i].d)), i == 7 ? 2 : 0;
    int blk = -1, off = 0;
    if (sscanf(d, "transformer_blocks.%d.%n", &blk, &off) != 1 || off == 0) fail_msg("unknown name %s", d);
    const char *r = d + off;
    static const struct { const char *d, *o; int op; } part[] = {
        {"attn.to_q.", "x_block.attn.qkv.", 1},          {"attn.to_k.", NULL, -1},
        {"attn.to_v.", NULL, -1},                        {"attn.add_q_proj.", "context_block.attn.qkv.", 1},
        {"attn.add_k_proj.", NULL, -1},                  {"attn.add_v_proj.", NULL, -1},
        {"attn2.to_q.", "x_block.attn2.qkv.", 1},        {"attn2.to_k.", NULL, -1},
        {"attn2.to_v.", NULL, -1},                       {"attn.norm_q.", "x_block.attn.ln_q.", 0},
        {"attn.norm_k.", "x_block.attn.ln_k.", 0},       {"attn.norm_added_q.", "context_block.attn.ln_q.", 0},
        {"attn.norm_added_k.", "context_block.attn.ln_k.", 0}, {"attn2.norm_q.", "x_block.attn2.ln_q.", 0},
        {"attn2.norm_k.", "x_block.attn2.ln_k.", 0},     {"attn.to_out.0.", "x_block.attn.proj.", 0},
        {"attn.to_add_out.", "context_block.attn.proj.", 0}, {"attn2.to_out.0.", "x_block.attn2.proj.", 0},
        {"norm1.linear.", "x_block.adaLN_modulation.1.", 0}, {"norm1_context.linear.", "context_block.adaLN_modulation.1.", 0},
        {"ff.net.0.proj.", "x_block.mlp.fc1.", 0},       {"ff.net.2.", "x_block.mlp.fc2.", 0},
        {"ff_context.net.0.proj.", "context_block.mlp.fc1.", 0}, {"ff_context.net.2.", "context_block.mlp.fc2.", 0},
    };
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        const size_t pl = strlen(part[i].d);
        if (strncmp(r, part[i].d, pl) != 0) continue;
        if (part[i].op < 0) return -1;
        snprintf(out, len, "joint_blocks.%d.%s%s", blk, part[i].o, r + pl);
        if (part[i].op == 1) { /* the k and v names next to q */
            char base[96];
            snprintf(base, sizeof base, "%.*s", (int)(strstr(d, part[i].d) - d), d);
            const bool ctx = strstr(part[i].d, "add_") != NULL;
            const char *stem = part[i].d[4] == '2' ? "attn2.to_" : ctx ? "attn.add_" : "attn.to_";
            snprintf(k_name, 160, "%s%sk%s%s", base, stem, ctx ? "_proj." : ".", r + pl);
            snprintf(v_name, 160, "%s%sv%s%s", base, stem, ctx ? "_proj." : ".", r + pl);
            return 1;
        }
        return blk == last && !strcmp(part[i].d, "norm1_context.linear.") ? 2 : 0;
    }
    fail_msg("unknown block part %s", d);
    return -1;
}

/* The sd35 MMDiT in the original layout under prefix: a safetensors image
 * (caller frees), *size set. */
static inline uint8_t *sd35_original(const char *prefix, size_t *size) {
    char path[512];
    rb_st_set *f = NULL;
    if (rb_st_open(tu_data(path, sizeof path, "sd3/pipelines/sd35/transformer/diffusion_pytorch_model.safetensors"),
                   &f, NULL) != RB_OK)
        fail_msg("cannot open the sd35 transformer");
    json_error_t je;
    json_t *c = json_load_file(tu_data(path, sizeof path, "sd3/pipelines/sd35/transformer/config.json"), 0, &je);
    if (!c) fail_msg("sd35 config: %s", je.text);
    const int last = (int)json_integer_value(json_object_get(c, "num_layers")) - 1;
    json_decref(c);
    assert_true(last >= 1);
    img b = img_new();
    for (int64_t i = 0; i < rb_st_n_tensors(f); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(f, i);
        char o[200], full[260], kn[160], vn[160];
        const int op = original_name(t->name, last, o, sizeof o, kn, vn);
        if (op < 0) continue;
        snprintf(full, sizeof full, "%s%s", prefix, o);
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        uint8_t *buf = malloc(3 * t->nbytes);
        assert_non_null(buf);
        size_t nb = t->nbytes;
        memcpy(buf, t->data, nb);
        if (op == 1) {
            const rb_st_tensor *k = rb_st_find(f, kn), *v = rb_st_find(f, vn);
            if (!k || !v) fail_msg("%s: no %s / %s", t->name, kn, vn);
            memcpy(buf + nb, k->data, nb);
            memcpy(buf + 2 * nb, v->data, nb);
            nb *= 3;
            ne[t->n_dims - 1] *= 3;
        } else if (op == 2) {
            memcpy(buf, (const uint8_t *)t->data + nb / 2, nb / 2);
            memcpy(buf + nb / 2, t->data, nb / 2);
        }
        img_add(&b, full, t->dtype, t->n_dims, ne, buf, nb);
        free(buf);
    }
    rb_st_close(f);
    return img_finish(&b, size);
}

#endif
