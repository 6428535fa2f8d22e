/* The text encoders of a single file in transformers' CLIPTextModel names.
 * CLIP ViT-L (SD 1.x, SDXL's first encoder) is stored in that layout already
 * under a prefix (with or without "text_model."). OpenCLIP (SD 2.x's ViT-H,
 * SDXL's bigG) has its own: token_embedding, positional_embedding,
 * transformer.resblocks.K.{ln_1, attn.in_proj_weight/bias (q, k and v
 * stacked), attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_final and a
 * text_projection applied as x @ P. The stacked projection becomes three
 * row views, the projection a transposed copy. Files written by diffusers'
 * conversion scripts mix in transformers' names (resblocks.K without
 * "transformer.", text_model.* embeddings and final norm, a
 * text_projection.weight already in linear form): those are taken as they
 * are. SD 2.x conditions on the penultimate layer, which diffusers' SD 2.x
 * text encoder expresses by dropping OpenCLIP's last layer. */
#include "sd/sd_ldm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends(const char *s, const char *e) {
    size_t n = strlen(s), m = strlen(e);
    return n >= m && strcmp(s + n - m, e) == 0;
}

static bool read_index(const char **p, int *out) {
    const char *s = *p;
    if (*s < '0' || *s > '9') return false;
    long v = 0;
    while (*s >= '0' && *s <= '9' && v < 100000) v = v * 10 + (*s++ - '0');
    if (*s != '.') return false;
    *out = (int)v;
    *p = s + 1;
    return true;
}

static int64_t dim(const sd_name_map *m, const char *name, int d) {
    const rb_st_tensor *t = sd_name_map_find(m, name);
    return t && d < t->n_dims ? t->ne[d] : 0;
}

/* Widths and depth from the mapped tensors. */
static rb_status text_shape(const sd_name_map *m, sd_ldm_text_shape *s, const char *what, rb_error *err) {
    s->present = true;
    s->vocab = dim(m, "text_model.embeddings.token_embedding.weight", 1);
    s->hidden = dim(m, "text_model.embeddings.token_embedding.weight", 0);
    s->positions = dim(m, "text_model.embeddings.position_embedding.weight", 1);
    s->intermediate = dim(m, "text_model.encoder.layers.0.mlp.fc1.weight", 1);
    s->projection = dim(m, "text_projection.weight", 1);
    char n[128];
    s->n_layers = 0;
    for (;;) {
        snprintf(n, sizeof n, "text_model.encoder.layers.%d.self_attn.q_proj.weight", s->n_layers);
        if (!sd_name_map_find(m, n)) break;
        s->n_layers++;
    }
    if (s->vocab <= 0 || s->hidden <= 0 || s->positions <= 0 || s->intermediate <= 0 || s->n_layers == 0 ||
        !sd_name_map_find(m, "text_model.final_layer_norm.weight"))
        return rb_error_set(err, RB_E_FORMAT, "%s text encoder: embeddings, layers or the final norm are missing", what);
    return RB_OK;
}

rb_status sd_ldm_map_clip_hf(const sd_tensor_list *ckpt, const char *prefix, sd_name_map *m, sd_ldm_text_shape *s,
                             rb_error *err) {
    const size_t pl = strlen(prefix);
    for (int64_t i = 0; i < ckpt->n; i++) {
        const rb_st_tensor *t = &ckpt->t[i];
        if (strncmp(t->name, prefix, pl) != 0 || ends(t->name, "position_ids")) continue;
        const char *p = t->name + pl;
        char name[320];
        if (starts(p, "text_model.") || starts(p, "text_projection.")) snprintf(name, sizeof name, "%s", p);
        else if (starts(p, "embeddings.") || starts(p, "encoder.") || starts(p, "final_layer_norm."))
            snprintf(name, sizeof name, "text_model.%s", p);
        else continue; /* logit_scale and other extras */
        rb_status st = sd_name_map_add(m, name, t, err);
        if (st != RB_OK) return st;
    }
    s->open_clip = false;
    return text_shape(m, s, "CLIP", err);
}

/* q, k or v rows (r = 0, 1, 2) of a stacked [3D, D] weight or [3D] bias. */
static rb_status add_row_view(sd_name_map *m, const char *name, const rb_st_tensor *t, int r, rb_error *err) {
    rb_st_tensor v = *t;
    const int last = t->n_dims - 1;
    if (t->n_dims < 1 || t->ne[last] % 3 != 0)
        return rb_error_set(err, RB_E_FORMAT, "OpenCLIP: %s is not three stacked projections", t->name);
    v.ne[last] = t->ne[last] / 3;
    v.nbytes = t->nbytes / 3;
    v.data = (const char *)t->data + (size_t)r * v.nbytes;
    return sd_name_map_add(m, name, &v, err);
}

/* text_projection [D, P] (x @ P) -> a linear weight [P, D]: transposed copy. */
static rb_status add_transposed(sd_name_map *m, const char *name, const rb_st_tensor *t, rb_error *err) {
    const size_t es = t->n_dims == 2 && t->ne[0] > 0 ? t->nbytes / (size_t)(t->ne[0] * t->ne[1]) : 0;
    if (es != 2 && es != 4) return rb_error_set(err, RB_E_FORMAT, "OpenCLIP: %s is not a 2-D float matrix", t->name);
    const int64_t P = t->ne[0], D = t->ne[1]; /* stored rows D of P */
    char *out = malloc(t->nbytes);
    if (!out) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    const char *in = t->data;
    for (int64_t d = 0; d < D; d++)
        for (int64_t p = 0; p < P; p++) memcpy(out + (size_t)(p * D + d) * es, in + (size_t)(d * P + p) * es, es);
    rb_st_tensor v = *t;
    v.ne[0] = D;
    v.ne[1] = P;
    return sd_name_map_add_owned(m, name, &v, out, err);
}

rb_status sd_ldm_map_open_clip(const sd_tensor_list *ckpt, const char *prefix, bool drop_last, sd_name_map *m,
                               sd_ldm_text_shape *s, rb_error *err) {
    const size_t pl = strlen(prefix);
    int n_blocks = 0;
    for (int64_t i = 0; i < ckpt->n; i++) {
        const char *n = ckpt->t[i].name;
        int k = 0;
        const char *p = n + pl;
        if (strncmp(n, prefix, pl) != 0) continue;
        if (starts(p, "transformer.")) p += 12;
        if (starts(p, "resblocks.") && (p += 10, read_index(&p, &k)) && k + 1 > n_blocks) n_blocks = k + 1;
    }
    const int keep = drop_last ? n_blocks - 1 : n_blocks;
    if (keep < 1) return rb_error_set(err, RB_E_FORMAT, "OpenCLIP text encoder: %d transformer blocks", n_blocks);
    static const struct { const char *from, *to; } block[] = {
        {"ln_1.", "layer_norm1."}, {"ln_2.", "layer_norm2."}, {"attn.out_proj.", "self_attn.out_proj."},
        {"mlp.c_fc.", "mlp.fc1."}, {"mlp.c_proj.", "mlp.fc2."},
    };
    static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
    for (int64_t i = 0; i < ckpt->n; i++) {
        const rb_st_tensor *t = &ckpt->t[i];
        if (strncmp(t->name, prefix, pl) != 0) continue;
        const char *p = t->name + pl;
        char name[320];
        rb_status st = RB_OK;
        int k = 0;
        if (!strcmp(p, "token_embedding.weight")) {
            st = sd_name_map_add(m, "text_model.embeddings.token_embedding.weight", t, err);
        } else if (!strcmp(p, "positional_embedding")) {
            st = sd_name_map_add(m, "text_model.embeddings.position_embedding.weight", t, err);
        } else if (starts(p, "ln_final.")) {
            snprintf(name, sizeof name, "text_model.final_layer_norm.%s", p + 9);
            st = sd_name_map_add(m, name, t, err);
        } else if (!strcmp(p, "text_projection")) {
            st = add_transposed(m, "text_projection.weight", t, err);
        } else if (!strcmp(p, "text_projection.weight") || starts(p, "text_model.")) { /* diffusers' scripts */
            st = sd_name_map_add(m, p, t, err);
        } else if ((starts(p, "transformer.resblocks.") || starts(p, "resblocks.")) &&
                   (p += starts(p, "transformer.") ? 22 : 10, read_index(&p, &k))) {
            if (k >= keep) continue;
            if (!strcmp(p, "attn.in_proj_weight") || !strcmp(p, "attn.in_proj_bias")) {
                const char *wb = ends(p, "weight") ? "weight" : "bias";
                for (int r = 0; r < 3 && st == RB_OK; r++) {
                    snprintf(name, sizeof name, "text_model.encoder.layers.%d.self_attn.%s.%s", k, qkv[r], wb);
                    st = add_row_view(m, name, t, r, err);
                }
            } else {
                size_t b = 0;
                while (b < sizeof block / sizeof block[0] && !starts(p, block[b].from)) b++;
                if (b == sizeof block / sizeof block[0])
                    return rb_error_set(err, RB_E_FORMAT, "OpenCLIP: unexpected tensor name \"%s\"", t->name);
                snprintf(name, sizeof name, "text_model.encoder.layers.%d.%s%s", k, block[b].to,
                         p + strlen(block[b].from));
                st = sd_name_map_add(m, name, t, err);
            }
        }
        if (st != RB_OK) return st;
    }
    s->open_clip = true;
    return text_shape(m, s, "OpenCLIP", err);
}
