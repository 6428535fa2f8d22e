/* sd_convert_to_gguf (see sd_convert.h): reads the configs and weights of a
 * diffusers pipeline folder, or a single-file checkpoint with its configs
 * (a config folder, else derived from the tensors), and plans the output
 * tensors in LDM names: one entry per output tensor, saying which stored
 * tensors make it and how (copied, OpenCLIP's q/k/v stacked, its projection
 * transposed, zeros). sdc_write then streams the plan to the file. */
#include "sd/sd_convert.h"
#include "sd/sd_sd3_gguf.h"

#include "rbee/json_config.h"
#include "rbee/sd_sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool path_in(char *buf, size_t cap, const char *dir, const char *rel) {
    int n = snprintf(buf, cap, "%s/%s", dir, rel);
    return n > 0 && (size_t)n < cap;
}

bool sd_convert_is_pipeline(const char *path) {
    char p[4096];
    return path && path_in(p, sizeof p, path, "unet/config.json") && is_file(p);
}

/* ---- the plan ---- */

rb_status sdc_plan_add(sdc_plan *p, const char *name, sdc_op op, const rb_st_tensor *const *src, int n_dims,
                       const int64_t *ne, rb_error *err) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        sdc_entry *e = realloc(p->e, cap * sizeof *e);
        if (!e) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        p->e = e;
        p->cap = cap;
    }
    sdc_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    e->op = op;
    const int n_src = op == SDC_CAT3 ? 3 : op == SDC_ZERO ? 0 : 1; /* src holds this many */
    for (int i = 0; i < n_src; i++) e->src[i] = src[i];
    e->n_dims = n_dims;
    for (int d = 0; d < RB_MAX_DIMS; d++) e->ne[d] = 1;
    for (int d = 0; d < n_dims && d < RB_MAX_DIMS; d++) e->ne[d] = ne[d];
    p->n++;
    return RB_OK;
}

void sdc_plan_free(sdc_plan *p) {
    for (size_t i = 0; i < p->n; i++) free(p->e[i].name);
    free(p->e);
    memset(p, 0, sizeof *p);
}

static bool float_dtype(rb_dtype t) { return t == RB_F32 || t == RB_F16 || t == RB_BF16 || t == RB_F64; }

static rb_status copy_entry(sdc_plan *p, const char *name, const rb_st_tensor *t, rb_error *err) {
    if (t->n_dims < 1)
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s' is a scalar (GGUF tensors have 1 to 4 dimensions)", t->name);
    return sdc_plan_add(p, name, SDC_COPY, &t, t->n_dims, t->ne, err);
}

/* ---- a diffusers folder ---- */

typedef struct folder {
    const char *dir;
    sd_weights w[4]; /* text, text_2, unet, vae (only .st is used) */
    bool open[4];
    sd_gguf_configs cfg;
} folder;

/* transformers' CLIPTextModel names with the "text_model." prefix (transformers 5 saves them without). */
static void clip_name(const char *name, char *buf, size_t cap) {
    if (starts(name, "text_model.") || starts(name, "text_projection."))
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "text_model.%s", name);
}

static const rb_st_tensor *find_clip(const rb_st_set *st, const char *canonical) {
    const rb_st_tensor *t = rb_st_find(st, canonical);
    if (!t && starts(canonical, "text_model.")) t = rb_st_find(st, canonical + 11);
    return t;
}

static rb_status plan_unet(folder *f, sdc_plan *p, rb_error *err) {
    const rb_unet_config *c = &f->cfg.unet;
    for (int l = 1; l < c->n_levels; l++)
        if (c->layers_per_block[l] != c->layers_per_block[0])
            return rb_error_set(err, RB_E_UNSUPPORTED, "unet: layers_per_block differs between levels; the LDM "
                                "layout numbers blocks with one count");
    const rb_st_set *st = f->w[2].st;
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        char n[400], name[440];
        if (!sdc_unet_name(c, t->name, n, sizeof n))
            return rb_error_set(err, RB_E_FORMAT, "unet: tensor '%s' is not part of the UNet the config describes",
                                t->name);
        snprintf(name, sizeof name, "model.diffusion_model.%s", n);
        rb_status s = copy_entry(p, name, t, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

static rb_status plan_vae(folder *f, sdc_plan *p, rb_error *err) {
    const rb_st_set *st = f->w[3].st;
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        char n[400], name[440];
        bool to_conv = false;
        if (!sdc_vae_name(&f->cfg.vae, t->name, n, sizeof n, &to_conv))
            return rb_error_set(err, RB_E_FORMAT, "vae: tensor '%s' is not part of the VAE the config describes",
                                t->name);
        snprintf(name, sizeof name, "first_stage_model.%s", n);
        rb_status s;
        if (to_conv && t->n_dims == 2) { /* [out, in] -> [out, in, 1, 1] */
            const int64_t ne[4] = {1, 1, t->ne[0], t->ne[1]};
            s = sdc_plan_add(p, name, SDC_COPY, &t, 4, ne, err);
        } else {
            s = copy_entry(p, name, t, err);
        }
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

/* OpenAI CLIP (transformers' layout kept) under prefix. */
static rb_status plan_clip_hf(const rb_st_set *st, const char *prefix, sdc_plan *p, rb_error *err) {
    for (int64_t i = 0; i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        if (!float_dtype(t->dtype)) continue; /* position_ids */
        char n[400], name[480];
        clip_name(t->name, n, sizeof n);
        snprintf(name, sizeof name, "%s%s", prefix, n);
        rb_status s = copy_entry(p, name, t, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

/* OpenCLIP's name of a transformers layer part. */
static const char *open_clip_part(const char *p, const char **rest) {
    static const struct { const char *from, *to; } map[] = {
        {"layer_norm1.", "ln_1."}, {"layer_norm2.", "ln_2."}, {"self_attn.out_proj.", "attn.out_proj."},
        {"mlp.fc1.", "mlp.c_fc."}, {"mlp.fc2.", "mlp.c_proj."},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (starts(p, map[i].from)) {
            *rest = p + strlen(map[i].from);
            return map[i].to;
        }
    return NULL;
}

/* OpenCLIP layout under prefix (model.): the layers' q/k/v stacked into
 * in_proj, text_projection transposed; extra_layer: append a zero layer. */
static rb_status plan_open_clip(const rb_st_set *st, const rb_clip_text_config *c, const char *prefix,
                                bool extra_layer, sdc_plan *p, rb_error *err) {
    char name[480], n[400];
    rb_status s = RB_OK;
    for (int64_t i = 0; i < rb_st_n_tensors(st) && s == RB_OK; i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        if (!float_dtype(t->dtype)) continue;
        clip_name(t->name, n, sizeof n);
        const char *r = n + 11; /* after "text_model." */
        if (!strcmp(n, "text_model.embeddings.token_embedding.weight")) {
            snprintf(name, sizeof name, "%stoken_embedding.weight", prefix);
            s = copy_entry(p, name, t, err);
        } else if (!strcmp(n, "text_model.embeddings.position_embedding.weight")) {
            snprintf(name, sizeof name, "%spositional_embedding", prefix);
            s = copy_entry(p, name, t, err);
        } else if (starts(n, "text_model.final_layer_norm.")) {
            snprintf(name, sizeof name, "%sln_final.%s", prefix, r + 17);
            s = copy_entry(p, name, t, err);
        } else if (!strcmp(n, "text_projection.weight")) {
            if (t->n_dims != 2) return rb_error_set(err, RB_E_FORMAT, "text_projection.weight is not 2-D");
            const int64_t ne[2] = {t->ne[1], t->ne[0]};
            snprintf(name, sizeof name, "%stext_projection", prefix);
            s = sdc_plan_add(p, name, SDC_TRANSPOSE, &t, 2, ne, err);
        } else if (starts(n, "text_model.encoder.layers.")) {
            const char *q = r + 15, *dot = strchr(q, '.'), *rest = NULL, *part;
            if (!dot) return rb_error_set(err, RB_E_FORMAT, "unexpected text encoder tensor '%s'", t->name);
            const int k = atoi(q);
            if (starts(dot + 1, "self_attn.k_proj.") || starts(dot + 1, "self_attn.v_proj.")) continue; /* with q */
            if (starts(dot + 1, "self_attn.q_proj.")) {
                const char *wb = dot + 1 + 17; /* "weight" or "bias" */
                const rb_st_tensor *qkv[3] = {t, NULL, NULL};
                static const char *const kv[2] = {"k_proj", "v_proj"};
                for (int m = 0; m < 2; m++) {
                    char kn[400];
                    snprintf(kn, sizeof kn, "text_model.encoder.layers.%d.self_attn.%s.%s", k, kv[m], wb);
                    qkv[m + 1] = find_clip(st, kn);
                    if (!qkv[m + 1] || qkv[m + 1]->n_dims != t->n_dims || memcmp(qkv[m + 1]->ne, t->ne, sizeof t->ne))
                        return rb_error_set(err, RB_E_FORMAT, "text encoder layer %d: %s.%s is missing or mis-shaped",
                                            k, kv[m], wb);
                }
                int64_t ne[2] = {t->ne[0], t->ne[1]};
                ne[t->n_dims - 1] *= 3;
                snprintf(name, sizeof name, "%stransformer.resblocks.%d.attn.in_proj_%s", prefix, k, wb);
                s = sdc_plan_add(p, name, SDC_CAT3, qkv, t->n_dims, ne, err);
            } else if ((part = open_clip_part(dot + 1, &rest))) {
                snprintf(name, sizeof name, "%stransformer.resblocks.%d.%s%s", prefix, k, part, rest);
                s = copy_entry(p, name, t, err);
            } else {
                return rb_error_set(err, RB_E_FORMAT, "unexpected text encoder tensor '%s'", t->name);
            }
        } else {
            return rb_error_set(err, RB_E_FORMAT, "unexpected text encoder tensor '%s'", t->name);
        }
    }
    if (s != RB_OK || !extra_layer) return s;
    /* SD 2.x: OpenCLIP's last layer, all zeros (an identity layer; see sd_convert.h) */
    const int64_t D = c->hidden_size, F = c->intermediate_size;
    const struct { const char *part; int nd; int64_t ne0, ne1; } z[] = {
        {"ln_1.weight", 1, D, 1},        {"ln_1.bias", 1, D, 1},          {"attn.in_proj_weight", 2, D, 3 * D},
        {"attn.in_proj_bias", 1, 3 * D, 1}, {"attn.out_proj.weight", 2, D, D}, {"attn.out_proj.bias", 1, D, 1},
        {"ln_2.weight", 1, D, 1},        {"ln_2.bias", 1, D, 1},          {"mlp.c_fc.weight", 2, D, F},
        {"mlp.c_fc.bias", 1, F, 1},      {"mlp.c_proj.weight", 2, F, D},  {"mlp.c_proj.bias", 1, D, 1},
    };
    for (size_t i = 0; i < sizeof z / sizeof z[0] && s == RB_OK; i++) {
        const int64_t ne[2] = {z[i].ne0, z[i].ne1};
        snprintf(name, sizeof name, "%stransformer.resblocks.%lld.%s", prefix, (long long)c->n_layers, z[i].part);
        s = sdc_plan_add(p, name, SDC_ZERO, NULL, z[i].nd, ne, err);
    }
    return s;
}

static rb_status read_text(const char *path, char **out, rb_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return rb_error_set(err, RB_E_IO, "cannot open %s", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *q = cap <= (16u << 20) ? realloc(buf, cap) : NULL;
            if (!q) {
                free(buf);
                fclose(f);
                return rb_error_set(err, RB_E_NOMEM, "%s: too large or out of memory", path);
            }
            buf = q;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    fclose(f);
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return rb_error_set(err, RB_E_FORMAT, "%s holds NUL bytes", path);
    }
    *out = buf;
    return RB_OK;
}

/* tokenizer_config.json's pad_token: a string or {"content": ...}; NULL when absent. */
static rb_status pad_token(const char *dir, const char *tok, char **out, rb_error *err) {
    char p[4096];
    *out = NULL;
    if (snprintf(p, sizeof p, "%s/%s/tokenizer_config.json", dir, tok) >= (int)sizeof p || !is_file(p)) return RB_OK;
    rb_json_config *j = NULL;
    rb_status s = rb_json_config_load(p, &j, err);
    if (s != RB_OK) return s;
    const char *v = NULL;
    if (rb_json_config_str(j, "pad_token", &v) != RB_OK) v = NULL;
    if (!v && rb_json_config_str(j, "pad_token.content", &v) != RB_OK) v = NULL;
    if (v && !(*out = strdup(v))) s = rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_json_config_free(j);
    return s;
}

/* unet/config.json's sample_size (an integer or [h, w]); left 0 when absent
 * or out of range. */
static rb_status unet_sample_size(const char *dir, sd_gguf_configs *c, rb_error *err) {
    char p[4096];
    if (!path_in(p, sizeof p, dir, "unet/config.json")) return rb_error_set(err, RB_E_INVALID, "path too long");
    rb_json_config *j = NULL;
    rb_status s = rb_json_config_load(p, &j, err);
    if (s != RB_OK) return s;
    int64_t v[2] = {0, 0};
    size_t n = 0;
    if (rb_json_config_int(j, "sample_size", &v[0]) == RB_OK)
        v[1] = v[0];
    else if (rb_json_config_arr_len(j, "sample_size", &n) != RB_OK || n != 2 ||
             rb_json_config_arr_int(j, "sample_size", 0, &v[0]) != RB_OK ||
             rb_json_config_arr_int(j, "sample_size", 1, &v[1]) != RB_OK)
        v[0] = v[1] = 0;
    rb_json_config_free(j);
    if (v[0] >= 1 && v[0] <= 1024 && v[1] >= 1 && v[1] <= 1024) {
        c->sample_size[0] = (int)v[0];
        c->sample_size[1] = (int)v[1];
    }
    return RB_OK;
}

/* The UNet's sample size, the scheduler config, checked by the engine's
 * parser, and the pad tokens. */
static rb_status pipeline_extras(const char *dir, sd_gguf_configs *c, rb_error *err) {
    char p[4096];
    rb_status su = unet_sample_size(dir, c, err);
    if (su != RB_OK) return su;
    if (path_in(p, sizeof p, dir, "scheduler/scheduler_config.json") && is_file(p)) {
        rb_status s = read_text(p, &c->scheduler_json, err);
        if (s != RB_OK) return s;
        rb_sd_sched_config sc;
        if ((s = rb_sd_sched_config_parse(&sc, c->scheduler_json, strlen(c->scheduler_json), err)) != RB_OK) {
            rb_error_prefix(err, "%s: ", p);
            return s;
        }
    }
    rb_status s = pad_token(dir, "tokenizer", &c->pad_token[0], err);
    return s == RB_OK ? pad_token(dir, "tokenizer_2", &c->pad_token[1], err) : s;
}

rb_status sd_convert_folder_configs(const char *dir, sd_gguf_configs *c, rb_error *err) {
    memset(c, 0, sizeof *c);
    char p[4096];
    static const char *const comp[3] = {"text_encoder", "text_encoder_2", "vae"};
    bool has[3];
    for (int i = 0; i < 3; i++)
        has[i] = snprintf(p, sizeof p, "%s/%s/config.json", dir, comp[i]) < (int)sizeof p && is_file(p);
    rb_status s;
    if (!path_in(p, sizeof p, dir, "unet/config.json")) return rb_error_set(err, RB_E_INVALID, "path too long");
    if ((s = rb_unet_config_load(p, &c->unet, err)) != RB_OK) return s;
    c->has_unet = true;
    if (has[0]) {
        snprintf(p, sizeof p, "%s/text_encoder/config.json", dir);
        if ((s = rb_clip_text_config_load(p, &c->text, err)) != RB_OK) return s;
        c->has_text = true;
    }
    if (has[1]) {
        snprintf(p, sizeof p, "%s/text_encoder_2/config.json", dir);
        if ((s = rb_clip_text_config_load(p, &c->text_2, err)) != RB_OK) return s;
        c->has_text_2 = true;
    }
    if (has[2]) {
        snprintf(p, sizeof p, "%s/vae/config.json", dir);
        if ((s = rb_vae_config_load(p, &c->vae, err)) != RB_OK) return s;
        c->has_vae = true;
    }
    if (c->unet.add_text_time)
        c->family = c->has_text ? SD_FAMILY_SDXL : SD_FAMILY_SDXL_REFINER;
    else
        c->family = c->unet.use_linear_projection ? SD_FAMILY_SD2 : SD_FAMILY_SD1;
    if (c->has_text_2 && c->family != SD_FAMILY_SDXL && c->family != SD_FAMILY_SDXL_REFINER)
        return rb_error_set(err, RB_E_UNSUPPORTED, "text_encoder_2 in a %s pipeline (only SDXL has two encoders)",
                            sd_family_name(c->family));
    if (c->family == SD_FAMILY_SDXL && !c->has_text_2)
        return rb_error_set(err, RB_E_FORMAT, "an SDXL pipeline without text_encoder_2");
    c->exact = true;
    return pipeline_extras(dir, c, err);
}

static rb_status plan_folder(folder *f, sdc_plan *p, rb_error *err) {
    static const char *const dirs[4] = {"text_encoder", "text_encoder_2", "unet", "vae"};
    static const char *const base[4] = {"model", "model", "diffusion_pytorch_model", "diffusion_pytorch_model"};
    const bool has[4] = {f->cfg.has_text, f->cfg.has_text_2, true, f->cfg.has_vae};
    for (int i = 0; i < 4; i++) {
        if (!has[i]) continue;
        char d[4096];
        if (!path_in(d, sizeof d, f->dir, dirs[i])) return rb_error_set(err, RB_E_INVALID, "path too long");
        rb_status s = sd_weights_open(&f->w[i], d, base[i], NULL, NULL, err);
        if (s != RB_OK) return s;
        f->open[i] = true;
    }
    rb_status s = plan_unet(f, p, err);
    if (s == RB_OK && f->cfg.has_vae) s = plan_vae(f, p, err);
    const sd_family fam = f->cfg.family;
    if (s == RB_OK && f->cfg.has_text) {
        if (fam == SD_FAMILY_SD1) s = plan_clip_hf(f->w[0].st, "cond_stage_model.transformer.", p, err);
        else if (fam == SD_FAMILY_SD2)
            s = plan_open_clip(f->w[0].st, &f->cfg.text, "cond_stage_model.model.", true, p, err);
        else s = plan_clip_hf(f->w[0].st, "conditioner.embedders.0.transformer.", p, err);
    }
    if (s == RB_OK && f->cfg.has_text_2)
        s = plan_open_clip(f->w[1].st, &f->cfg.text_2,
                           fam == SD_FAMILY_SDXL ? "conditioner.embedders.1.model." : "conditioner.embedders.0.model.",
                           false, p, err);
    return s;
}

static rb_status convert_folder(const char *dir, const char *out_path, const rb_convert_opts *opts,
                                rb_convert_stats *stats, rb_error *err) {
    folder f;
    memset(&f, 0, sizeof f);
    f.dir = dir;
    sdc_plan plan = {0};
    rb_status s = sd_convert_folder_configs(dir, &f.cfg, err);
    if (s == RB_OK) s = plan_folder(&f, &plan, err);
    if (s == RB_OK) {
        f.cfg.exact = true;
        s = sdc_write(&plan, &f.cfg, out_path, opts->name ? opts->name : dir, opts, stats, err);
    }
    sdc_plan_free(&plan);
    for (int i = 0; i < 4; i++)
        if (f.open[i]) sd_weights_close(&f.w[i]);
    sd_gguf_configs_free(&f.cfg);
    return s;
}

/* ---- a single-file checkpoint ---- */

static const char *const k_prefixes[] = {"model.diffusion_model.", "first_stage_model.", "cond_stage_model.",
                                         "conditioner.embedders."};

/* Configs from a pipeline folder, which must describe every component of
 * the checkpoint (single files hold all of them) and be of its family. */
static rb_status configs_from(const char *dir, const sd_ldm *l, sd_gguf_configs *c, rb_error *err) {
    rb_status s = sd_convert_folder_configs(dir, c, err);
    if (s != RB_OK) return s;
    if (c->family != l->family)
        return rb_error_set(err, RB_E_FORMAT, "the configs of %s describe an %s pipeline, the checkpoint is %s", dir,
                            sd_family_name(c->family), sd_family_name(l->family));
    const bool need[4] = {sd_gguf_component_map(l, l->family, SD_GGUF_TEXT) != NULL,
                          sd_gguf_component_map(l, l->family, SD_GGUF_TEXT_2) != NULL, l->unet.n > 0, l->vae.n > 0};
    const bool have[4] = {c->has_text, c->has_text_2, c->has_unet, c->has_vae};
    static const char *const what[4] = {"text_encoder", "text_encoder_2", "unet", "vae"};
    for (int i = 0; i < 4; i++)
        if (need[i] != have[i])
            return rb_error_set(err, RB_E_FORMAT, "%s %s a %s config but the checkpoint %s one", dir,
                                have[i] ? "has" : "lacks", what[i], need[i] ? "has" : "has no");
    c->exact = true;
    return RB_OK;
}

static rb_status convert_single(const char *path, const char *out_path, const rb_convert_opts *opts,
                                const char *config_dir, rb_convert_stats *stats, rb_error *err) {
    rb_st_set *st = NULL;
    sd_tensor_list list = {0};
    sd_ldm l;
    memset(&l, 0, sizeof l);
    sd_gguf_configs cfg;
    memset(&cfg, 0, sizeof cfg);
    sdc_plan plan = {0};
    rb_status s = rb_st_open(path, &st, err);
    if (s == RB_OK) s = sd_tensor_list_st(st, &list, err);
    if (s == RB_OK) s = sd_ldm_build(&list, &l, err);
    if (s == RB_OK)
        s = config_dir ? configs_from(config_dir, &l, &cfg, err) : sd_gguf_derive_configs(&l, l.family, &cfg, err);
    for (int64_t i = 0; s == RB_OK && i < rb_st_n_tensors(st); i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        bool known = false;
        for (size_t k = 0; k < sizeof k_prefixes / sizeof k_prefixes[0]; k++) known |= starts(t->name, k_prefixes[k]);
        if (!known || !float_dtype(t->dtype) || t->n_dims < 1) {
            if (opts->log) fprintf(opts->log, "warning: skipping tensor '%s'\n", t->name);
            continue;
        }
        s = copy_entry(&plan, t->name, t, err);
    }
    if (s == RB_OK) s = sdc_write(&plan, &cfg, out_path, opts->name ? opts->name : path, opts, stats, err);
    sdc_plan_free(&plan);
    sd_gguf_configs_free(&cfg);
    sd_ldm_free(&l);
    sd_tensor_list_free(&list);
    rb_st_close(st);
    return s;
}

/* An SD3 / SD3.5 single file (MMDiT joint_blocks), which the SD3 converter
 * writes (sd_sd3_gguf.h). */
static bool is_sd3_file(const char *path) {
    rb_st_set *st = NULL;
    rb_error e;
    rb_error_clear(&e);
    if (rb_st_open(path, &st, &e) != RB_OK) return false;
    sd_tensor_list l;
    bool r = false;
    if (sd_tensor_list_st(st, &l, &e) == RB_OK) {
        r = sd_sd3_detect(&l);
        sd_tensor_list_free(&l);
    }
    rb_st_close(st);
    return r;
}

rb_status sd_convert_to_gguf(const char *input, const char *out_path, const rb_convert_opts *opts,
                             const char *config_dir, rb_convert_stats *stats, rb_error *err) {
    rb_convert_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!input || !out_path || !opts) return rb_error_set(err, RB_E_INVALID, "convert: NULL argument");
    if (!rb_convert_type_ok(opts->type))
        return rb_error_set(err, RB_E_INVALID, "convert: cannot write weights as %s (supported: %s)",
                            rb_dtype_name(opts->type), rb_convert_type_list());
    rb_status s;
    if (is_dir(input) && sd_sd3_is_folder(input)) {
        return sd_sd3_convert_to_gguf(input, out_path, opts, config_dir, stats, err); /* its messages name input */
    } else if (is_dir(input)) {
        if (config_dir)
            return rb_error_set(err, RB_E_INVALID, "convert: --config is for single-file checkpoints (%s is a folder)",
                                input);
        if (!sd_convert_is_pipeline(input))
            return rb_error_set(err, RB_E_NOT_FOUND, "%s: not a diffusers pipeline folder (no unet/config.json)",
                                input);
        s = convert_folder(input, out_path, opts, stats, err);
    } else if (is_sd3_file(input)) {
        return sd_sd3_convert_to_gguf(input, out_path, opts, config_dir, stats, err); /* its messages name input */
    } else {
        if (config_dir && !sd_convert_is_pipeline(config_dir))
            return rb_error_set(err, RB_E_NOT_FOUND, "%s: not a diffusers pipeline folder (no unet/config.json)",
                                config_dir);
        s = convert_single(input, out_path, opts, config_dir, stats, err);
    }
    if (s != RB_OK) rb_error_prefix(err, "%s: ", input);
    return s;
}
