/* sd_sd3_convert_to_gguf (see sd_sd3_gguf.h): an SD3 single file or
 * diffusers folder to GGUF in the single-file layout. A plan lists each
 * output tensor with how it is made: a single file's tensors are copied
 * under their own names; a folder's get their original names (the inverse
 * of sd_sd3_mmdit.c: q/k/v stacked, the last context adaLN's and the final
 * layer's halves swapped; the VAE's names as the SD converter writes them,
 * sdc_vae_name; the encoders under text_encoders.*). The plan's shapes go
 * through sd_sd3_build first, so a folder gets the same checks and derived
 * configs as a single file, with its own config.json values for the rest
 * (sd_sd3_meta_make). Tensors are then streamed: decoded to f32, made,
 * encoded in the dtype their class and the target type give, one tensor in
 * memory at a time. */
#include "sd/sd_sd3_gguf.h"

#include "sd/sd_convert.h"
#include "rbee/sd_mmdit.h"

#include "convert/tensor_xform.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends(const char *s, const char *e) {
    size_t n = strlen(s), m = strlen(e);
    return n >= m && strcmp(s + n - m, e) == 0;
}

rb_dtype sd_sd3_gguf_dtype(const char *name, int n_dims, int64_t ne0, rb_dtype t, bool *is_mat, bool *fallback) {
    const bool fl = t == RB_F32 || t == RB_F16 || t == RB_BF16;
    *is_mat = *fallback = false;
    if (n_dims <= 1 || n_dims == 3 || ends(name, "position_embedding.weight") ||
        ends(name, "relative_attention_bias.weight"))
        return RB_F32; /* vectors, pos_embed, position tables, T5's bucket biases */
    if (ends(name, "token_embedding.weight") || ends(name, "shared.weight") || ends(name, "embed_tokens.weight"))
        return fl ? t : RB_F16;
    if (n_dims == 4) return t == RB_F32 || t == RB_BF16 ? t : RB_F16;
    *is_mat = true;
    const rb_dtype d = rb_convert_weight_dtype(t, ne0, false);
    *fallback = d != t;
    return d;
}

static const char *const k_prefixes[] = {"model.diffusion_model.", "first_stage_model.", "text_encoders.clip_l.",
                                         "text_encoders.clip_g.", "text_encoders.t5xxl."};

static bool known(const char *name) {
    if (ends(name, "position_ids")) return false; /* CLIP's index buffer */
    for (size_t k = 0; k < sizeof k_prefixes / sizeof k_prefixes[0]; k++)
        if (starts(name, k_prefixes[k])) return true;
    return false;
}

static const char *base_name(const char *path, char *buf, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = n - b;
    const char *dot = memchr(path + b, '.', len);
    if (dot && dot > path + b) len = (size_t)(dot - (path + b));
    snprintf(buf, cap, "%.*s", (int)len, path + b);
    return buf;
}

static int64_t n_elem(const rb_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

/* One output tensor: its name, shape and how its values are made from the
 * stored tensors. */
typedef enum { OP_COPY, OP_CAT3, OP_SWAP } sd3_op;
typedef struct sd3_entry {
    char *name;
    sd3_op op;
    const rb_st_tensor *src[3]; /* OP_CAT3: q, k, v stacked; else src[0] */
    int n_dims;
    int64_t ne[RB_MAX_DIMS];
} sd3_entry;

typedef struct sd3_plan {
    sd3_entry *e;
    size_t n, cap;
} sd3_plan;

static void plan_free(sd3_plan *p) {
    for (size_t i = 0; i < p->n; i++) free(p->e[i].name);
    free(p->e);
    memset(p, 0, sizeof *p);
}

/* ne: the output's shape (NULL: src[0]'s); nd: its rank. */
static rb_status plan_add(sd3_plan *p, const char *name, sd3_op op, const rb_st_tensor *const *src, int nd,
                          const int64_t *ne, rb_error *err) {
    if (p->n == p->cap) {
        const size_t cap = p->cap ? 2 * p->cap : 256;
        sd3_entry *e = realloc(p->e, cap * sizeof *e);
        if (!e) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        p->e = e;
        p->cap = cap;
    }
    sd3_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    p->n++;
    e->op = op;
    for (int k = 0; k < (op == OP_CAT3 ? 3 : 1); k++) e->src[k] = src[k];
    e->n_dims = ne ? nd : src[0]->n_dims;
    for (int d = 0; d < RB_MAX_DIMS; d++) e->ne[d] = d < e->n_dims ? (ne ? ne[d] : src[0]->ne[d]) : 1;
    return RB_OK;
}

static rb_status decode(const rb_st_tensor *t, float *x, int64_t n, rb_error *err) {
    if (n_elem(t) != n)
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s' has %lld elements, %lld expected", t->name,
                            (long long)n_elem(t), (long long)n);
    if (rb_dequantize_row(t->dtype, t->data, x, n) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "cannot read tensor '%s' (%s)", t->name, rb_dtype_name(t->dtype));
    return RB_OK;
}

/* The f32 values of e into x (n elements). */
static rb_status values(const sd3_entry *e, float *x, int64_t n, rb_error *err) {
    rb_status s = RB_OK;
    switch (e->op) {
    case OP_COPY: return decode(e->src[0], x, n, err);
    case OP_CAT3:
        for (int k = 0; k < 3 && s == RB_OK; k++) s = decode(e->src[k], x + k * (n / 3), n / 3, err);
        return s;
    case OP_SWAP: /* diffusers' (scale, shift) rows -> the original's (shift, scale) */
        if ((s = decode(e->src[0], x, n, err)) != RB_OK) return s;
        for (int64_t j = 0; j < n / 2; j++) {
            const float t = x[j];
            x[j] = x[n / 2 + j];
            x[n / 2 + j] = t;
        }
        return RB_OK;
    }
    return rb_error_set(err, RB_E_INVALID, "unknown plan op");
}

/* Streams the plan with s's configs to out_path. */
static rb_status write_plan(const sd3_plan *p, const sd_sd3 *s, const sd_sd3_meta *m, const char *out_path,
                            const char *name, const rb_convert_opts *opts, rb_convert_stats *stats, rb_error *err) {
    rb_gguf_tensor_desc *desc = calloc(p->n ? p->n : 1, sizeof *desc);
    if (!desc) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        const sd3_entry *e = &p->e[i];
        bool mat = false, fb = false;
        desc[i].name = e->name;
        desc[i].n_dims = e->n_dims;
        memcpy(desc[i].ne, e->ne, sizeof e->ne);
        desc[i].dtype = sd_sd3_gguf_dtype(e->name, e->n_dims, e->ne[0], opts->type, &mat, &fb);
        if (mat && fb) stats->n_fallback++;
        else if (mat) stats->n_quantized++;
        if (mat && fb && opts->log)
            fprintf(opts->log, "warning: %s: rows of %lld are not whole %s blocks; writing f16\n", e->name,
                    (long long)e->ne[0], rb_dtype_name(opts->type));
    }
    rb_gguf_writer *w = NULL;
    rb_gguf_stream *out = NULL;
    rb_status r = rb_gguf_writer_create(&w, err);
    if (r == RB_OK && (rb_gguf_writer_set_str(w, "general.architecture", "sd3") != RB_OK ||
                       rb_gguf_writer_set_str(w, "general.name", opts->name ? opts->name : name) != RB_OK ||
                       rb_gguf_writer_set_u32(w, "general.file_type", rb_convert_file_type(opts->type)) != RB_OK ||
                       rb_gguf_writer_set_u32(w, "general.quantization_version", 2) != RB_OK))
        r = rb_error_set(err, RB_E_NOMEM, "cannot write the general.* metadata");
    if (r == RB_OK) r = sd_sd3_meta_write(w, s, m, err);
    if (r == RB_OK) r = rb_gguf_stream_begin(out_path, w, desc, p->n, &out, err);
    rb_gguf_writer_free(w);
    cv_buf f32 = {0}, enc = {0};
    for (size_t i = 0; r == RB_OK && i < p->n; i++) {
        const sd3_entry *e = &p->e[i];
        const int64_t ne = e->ne[0] * e->ne[1] * e->ne[2] * e->ne[3];
        const size_t nbytes = rb_gguf_stream_tensor_bytes(out, i);
        if (cv_buf_reserve(&f32, sizeof(float) * (size_t)(ne ? ne : 1)) != RB_OK ||
            cv_buf_reserve(&enc, nbytes ? nbytes : 1) != RB_OK) {
            r = rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", e->name);
            break;
        }
        float *x = f32.p;
        if ((r = values(e, x, ne, err)) != RB_OK) break;
        if ((r = cv_encode_rows(desc[i].dtype, x, e->ne[0], ne / e->ne[0], enc.p)) != RB_OK) {
            rb_error_set(err, r, "cannot encode '%s' as %s", e->name, rb_dtype_name(desc[i].dtype));
            break;
        }
        if ((r = rb_gguf_stream_write(out, enc.p, nbytes, err)) != RB_OK) break;
        if (opts->progress) opts->progress(opts->progress_ud, (int64_t)i + 1, (int64_t)p->n, e->name);
    }
    cv_buf_free(&f32);
    cv_buf_free(&enc);
    if (r == RB_OK && out) {
        stats->n_tensors = (int64_t)p->n;
        r = rb_gguf_stream_finish(out, &stats->bytes_out, err);
    } else {
        rb_gguf_stream_abort(out);
    }
    free(desc);
    return r;
}

/* An MMDiT name saved without "model.diffusion_model." (a diffusion model
 * stored alone). */
static bool bare_mmdit(const char *name) {
    static const char *const top[] = {"joint_blocks.", "x_embedder.", "t_embedder.", "y_embedder.",
                                      "context_embedder.", "final_layer.", "pos_embed"};
    for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
        if (starts(name, top[k])) return true;
    return false;
}

/* A single file's tensors under the known prefixes, as they are (a bare
 * MMDiT's under "model.diffusion_model."). */
static rb_status plan_single(const rb_st_set *st, sd3_plan *p, const rb_convert_opts *opts, rb_error *err) {
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        const bool fl = t->dtype == RB_F32 || t->dtype == RB_F16 || t->dtype == RB_BF16;
        const bool bare = !known(t->name) && bare_mmdit(t->name);
        if ((!known(t->name) && !bare) || !fl || t->n_dims < 1) {
            if (opts->log) fprintf(opts->log, "warning: skipping tensor '%s'\n", t->name);
            continue;
        }
        char name[400];
        if (snprintf(name, sizeof name, "%s%s", bare ? "model.diffusion_model." : "", t->name) >= (int)sizeof name)
            return rb_error_set(err, RB_E_FORMAT, "tensor name too long: %s", t->name);
        rb_status s = plan_add(p, name, OP_COPY, &t, 0, NULL, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

/* ---- a diffusers SD3 folder ---- */

/* The original name of a diffusers MMDiT tensor (without the prefix) and
 * how it is made: OP_CAT3 (q; k and v named in k_name / v_name), OP_SWAP,
 * OP_COPY; -1: a k / v that goes with its q; -2: not an MMDiT name. */
static int mmdit_original(const char *d, int last, char *out, size_t cap, char *k_name, char *v_name, size_t kcap) {
    static const struct { const char *d, *o; bool swap; } top[] = {
        {"pos_embed.proj.", "x_embedder.proj.", false},
        {"time_text_embed.timestep_embedder.linear_1.", "t_embedder.mlp.0.", false},
        {"time_text_embed.timestep_embedder.linear_2.", "t_embedder.mlp.2.", false},
        {"time_text_embed.text_embedder.linear_1.", "y_embedder.mlp.0.", false},
        {"time_text_embed.text_embedder.linear_2.", "y_embedder.mlp.2.", false},
        {"context_embedder.", "context_embedder.", false},
        {"proj_out.", "final_layer.linear.", false},
        {"norm_out.linear.", "final_layer.adaLN_modulation.1.", true},
    };
    if (!strcmp(d, "pos_embed.pos_embed")) return snprintf(out, cap, "pos_embed") < (int)cap ? OP_COPY : -2;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (starts(d, top[i].d))
            return snprintf(out, cap, "%s%s", top[i].o, d + strlen(top[i].d)) < (int)cap ? (top[i].swap ? OP_SWAP : OP_COPY)
                                                                                          : -2;
    if (!starts(d, "transformer_blocks.")) return -2;
    const char *p = d + 19;
    int b = 0;
    while (*p >= '0' && *p <= '9' && b < 100000) b = b * 10 + (*p++ - '0');
    if (*p != '.' || p == d + 19) return -2;
    const char *r = p + 1;
    /* q of a triple: its stem, and where k / v are */
    static const struct { const char *q, *k, *v, *o; } qkv[] = {
        {"attn.to_q.", "attn.to_k.", "attn.to_v.", "x_block.attn.qkv."},
        {"attn.add_q_proj.", "attn.add_k_proj.", "attn.add_v_proj.", "context_block.attn.qkv."},
        {"attn2.to_q.", "attn2.to_k.", "attn2.to_v.", "x_block.attn2.qkv."},
    };
    for (size_t i = 0; i < sizeof qkv / sizeof qkv[0]; i++) {
        if (starts(r, qkv[i].k) || starts(r, qkv[i].v)) return -1;
        if (!starts(r, qkv[i].q)) continue;
        const char *wb = r + strlen(qkv[i].q);
        if (snprintf(out, cap, "joint_blocks.%d.%s%s", b, qkv[i].o, wb) >= (int)cap ||
            snprintf(k_name, kcap, "transformer_blocks.%d.%s%s", b, qkv[i].k, wb) >= (int)kcap ||
            snprintf(v_name, kcap, "transformer_blocks.%d.%s%s", b, qkv[i].v, wb) >= (int)kcap)
            return -2;
        return OP_CAT3;
    }
    static const struct { const char *d, *o; } part[] = {
        {"attn.norm_q.", "x_block.attn.ln_q."},          {"attn.norm_k.", "x_block.attn.ln_k."},
        {"attn.norm_added_q.", "context_block.attn.ln_q."}, {"attn.norm_added_k.", "context_block.attn.ln_k."},
        {"attn2.norm_q.", "x_block.attn2.ln_q."},        {"attn2.norm_k.", "x_block.attn2.ln_k."},
        {"attn.to_out.0.", "x_block.attn.proj."},        {"attn.to_add_out.", "context_block.attn.proj."},
        {"attn2.to_out.0.", "x_block.attn2.proj."},      {"norm1.linear.", "x_block.adaLN_modulation.1."},
        {"norm1_context.linear.", "context_block.adaLN_modulation.1."},
        {"ff.net.0.proj.", "x_block.mlp.fc1."},          {"ff.net.2.", "x_block.mlp.fc2."},
        {"ff_context.net.0.proj.", "context_block.mlp.fc1."}, {"ff_context.net.2.", "context_block.mlp.fc2."},
    };
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        if (!starts(r, part[i].d)) continue;
        if (snprintf(out, cap, "joint_blocks.%d.%s%s", b, part[i].o, r + strlen(part[i].d)) >= (int)cap) return -2;
        return b == last && starts(r, "norm1_context.") ? OP_SWAP : OP_COPY;
    }
    return -2;
}

static rb_status plan_mmdit(const rb_st_set *st, int num_layers, sd3_plan *p, rb_error *err) {
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        char o[320], full[360], kn[320], vn[320];
        const int op = mmdit_original(t->name, num_layers - 1, o, sizeof o, kn, vn, sizeof kn);
        if (op == -1) continue;
        if (op == -2)
            return rb_error_set(err, RB_E_FORMAT, "transformer: tensor '%s' is not part of an SD3 MMDiT", t->name);
        snprintf(full, sizeof full, "model.diffusion_model.%s", o);
        if (op != OP_CAT3) {
            rb_status s = plan_add(p, full, (sd3_op)op, &t, 0, NULL, err);
            if (s != RB_OK) return s;
            continue;
        }
        const rb_st_tensor *src[3] = {t, rb_st_find(st, kn), rb_st_find(st, vn)};
        for (int k = 1; k < 3; k++)
            if (!src[k] || src[k]->n_dims != t->n_dims || memcmp(src[k]->ne, t->ne, sizeof t->ne) != 0)
                return rb_error_set(err, RB_E_FORMAT, "transformer: %s is missing or shaped unlike %s",
                                    k == 1 ? kn : vn, t->name);
        int64_t ne[RB_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        ne[t->n_dims - 1] *= 3;
        rb_status s = plan_add(p, full, OP_CAT3, src, t->n_dims, ne, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

static rb_status plan_vae(const rb_st_set *st, const rb_vae_config *c, sd3_plan *p, rb_error *err) {
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        char n[320], full[360];
        bool to_conv = false;
        if (!sdc_vae_name(c, t->name, n, sizeof n, &to_conv))
            return rb_error_set(err, RB_E_FORMAT, "vae: tensor '%s' is not part of the VAE its config describes",
                                t->name);
        snprintf(full, sizeof full, "first_stage_model.%s", n);
        const int64_t conv[4] = {1, 1, t->ne[0], t->ne[1]}; /* [out, in] -> [out, in, 1, 1], as the original */
        rb_status s = to_conv && t->n_dims == 2 ? plan_add(p, full, OP_COPY, &t, 4, conv, err)
                                                : plan_add(p, full, OP_COPY, &t, 0, NULL, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

/* An encoder under prefix; clip: transformers' CLIP names get "text_model.". */
static rb_status plan_text(const rb_st_set *st, const char *prefix, bool clip, sd3_plan *p, rb_error *err) {
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        if (t->dtype != RB_F32 && t->dtype != RB_F16 && t->dtype != RB_BF16) continue; /* position_ids */
        char full[400];
        const bool add = clip && !starts(t->name, "text_model.") && !starts(t->name, "text_projection.");
        snprintf(full, sizeof full, "%s%s%s", prefix, add ? "text_model." : "", t->name);
        rb_status s = plan_add(p, full, OP_COPY, &t, 0, NULL, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

bool sd_sd3_is_folder(const char *dir) {
    char p[4096];
    FILE *f = NULL;
    if (snprintf(p, sizeof p, "%s/unet/config.json", dir) >= (int)sizeof p) return false;
    if ((f = fopen(p, "rb"))) {
        fclose(f);
        return false;
    }
    if (snprintf(p, sizeof p, "%s/transformer/config.json", dir) >= (int)sizeof p || !(f = fopen(p, "rb")))
        return false;
    fclose(f);
    return true;
}

/* The components of an SD3 folder: transformer (required), vae,
 * text_encoder, text_encoder_2, text_encoder_3 when present. */
typedef struct sd3_folder {
    sd_weights w[5]; /* only .st is used */
    bool open[5];
    const rb_st_set *st[5];
    rb_vae_config vae;
} sd3_folder;

static void folder_close(sd3_folder *f) {
    for (int i = 0; i < 5; i++)
        if (f->open[i]) sd_weights_close(&f->w[i]);
    memset(f, 0, sizeof *f);
}

static rb_status folder_open(const char *dir, sd3_folder *f, rb_error *err) {
    static const char *const comp[5] = {"transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"};
    static const char *const base[5] = {"diffusion_pytorch_model", "diffusion_pytorch_model", "model", "model", "model"};
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 5; i++) {
        char d[4096], cfg[4200];
        snprintf(d, sizeof d, "%s/%s", dir, comp[i]);
        snprintf(cfg, sizeof cfg, "%s/config.json", d);
        FILE *fp = fopen(cfg, "rb");
        if (!fp) {
            if (i == 0) return rb_error_set(err, RB_E_NOT_FOUND, "%s: no transformer/config.json", dir);
            continue;
        }
        fclose(fp);
        rb_status s = sd_weights_open(&f->w[i], d, base[i], NULL, NULL, err); /* the file(s), fp16 variant too */
        if (s != RB_OK) return s;
        f->open[i] = true;
        f->st[i] = f->w[i].st;
        if (i == 1 && (s = rb_vae_config_load(cfg, &f->vae, err)) != RB_OK) return s;
    }
    return RB_OK;
}

/* The plan's shapes as a tensor list in the single-file layout, for
 * sd_sd3_build's checks and configs: every entry points at its first
 * source's data (a fused q/k/v's views are never read while building; a
 * swapped modulation is read, and has its source's size). */
static rb_status shape_list(const sd3_plan *p, sd_tensor_list *l, rb_error *err) {
    memset(l, 0, sizeof *l);
    l->owned = calloc(p->n ? p->n : 1, sizeof *l->owned);
    if (!l->owned) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        const sd3_entry *e = &p->e[i];
        rb_st_tensor *t = &l->owned[i];
        t->name = e->name;
        t->dtype = e->src[0]->dtype;
        t->n_dims = e->n_dims;
        memcpy(t->ne, e->ne, sizeof t->ne);
        t->nbytes = e->src[0]->nbytes * (e->op == OP_CAT3 ? 3 : 1);
        t->data = e->src[0]->data;
    }
    l->t = l->owned;
    l->n = (int64_t)p->n;
    return RB_OK;
}

static rb_status convert_folder(const char *dir, const char *out_path, const rb_convert_opts *opts,
                                rb_convert_stats *stats, rb_error *err) {
    sd3_folder f;
    sd3_plan plan = {0};
    sd_tensor_list list = {0};
    sd_sd3 s;
    memset(&s, 0, sizeof s);
    sd_sd3_meta m;
    char path[4200], nb[256];
    rb_mmdit_config mc;
    rb_status r = folder_open(dir, &f, err);
    if (r == RB_OK) {
        snprintf(path, sizeof path, "%s/transformer/config.json", dir);
        r = rb_mmdit_config_load(path, &mc, err);
    }
    if (r == RB_OK) r = plan_mmdit(f.st[0], mc.num_layers, &plan, err);
    if (r == RB_OK && f.st[1]) r = plan_vae(f.st[1], &f.vae, &plan, err);
    if (r == RB_OK && f.st[2]) r = plan_text(f.st[2], "text_encoders.clip_l.transformer.", true, &plan, err);
    if (r == RB_OK && f.st[3]) r = plan_text(f.st[3], "text_encoders.clip_g.transformer.", true, &plan, err);
    if (r == RB_OK && f.st[4]) r = plan_text(f.st[4], "text_encoders.t5xxl.transformer.", false, &plan, err);
    if (r == RB_OK) r = shape_list(&plan, &list, err);
    if (r == RB_OK) r = sd_sd3_build(&list, &s, err);
    if (r == RB_OK) r = sd_sd3_meta_make(&s, dir, &m, err);
    if (r == RB_OK) r = write_plan(&plan, &s, &m, out_path, base_name(dir, nb, sizeof nb), opts, stats, err);
    sd_sd3_free(&s);
    sd_tensor_list_free(&list);
    plan_free(&plan);
    folder_close(&f);
    return r;
}

rb_status sd_sd3_convert_to_gguf(const char *input, const char *out_path, const rb_convert_opts *opts,
                                 const char *config_dir, rb_convert_stats *stats, rb_error *err) {
    rb_convert_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!input || !out_path || !opts) return rb_error_set(err, RB_E_INVALID, "convert: NULL argument");
    if (!rb_convert_type_ok(opts->type))
        return rb_error_set(err, RB_E_INVALID, "convert: cannot write weights as %s (supported: %s)",
                            rb_dtype_name(opts->type), rb_convert_type_list());
    if (sd_sd3_is_folder(input)) {
        if (config_dir)
            return rb_error_set(err, RB_E_INVALID, "convert: a configs folder is for single files (%s is a folder)",
                                input);
        rb_status r = convert_folder(input, out_path, opts, stats, err);
        if (r != RB_OK) rb_error_prefix(err, "%s: ", input);
        return r;
    }
    rb_st_set *st = NULL;
    sd_tensor_list list = {0};
    sd_sd3 s;
    memset(&s, 0, sizeof s);
    sd_sd3_meta m;
    char nb[256];
    rb_status r = rb_st_open(input, &st, err);
    if (r == RB_OK) r = sd_tensor_list_st(st, &list, err);
    if (r == RB_OK) r = sd_sd3_build(&list, &s, err);
    if (r == RB_OK) r = sd_sd3_meta_make(&s, config_dir, &m, err);
    sd3_plan plan = {0};
    if (r == RB_OK) r = plan_single(st, &plan, opts, err);
    if (r == RB_OK) r = write_plan(&plan, &s, &m, out_path, base_name(input, nb, sizeof nb), opts, stats, err);
    plan_free(&plan);
    sd_sd3_free(&s);
    sd_tensor_list_free(&list);
    rb_st_close(st);
    if (r != RB_OK) rb_error_prefix(err, "%s: ", input);
    return r;
}
