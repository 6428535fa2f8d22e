/* config.json of a CLIPTextModel / CLIPTextModelWithProjection (transformers'
 * CLIPTextConfig, whose defaults fill absent fields) into rb_clip_text_config. */
#include "rbee/sd_model.h"
#include "sd/sd_cfg.h"

#include <string.h>

static rb_status parse(const sd_cfg *j, rb_clip_text_config *c) {
    memset(c, 0, sizeof *c);
    const char *s = NULL;
    SD_TRY_J(sd_cfg_str(j, "model_type", &s));
    if (s && strcmp(s, "clip_text_model") != 0)
        return sd_cfg_unsupported(j, "model_type", "a CLIP text model config is expected");
    json_t *arch = json_object_get(j->root, "architectures");
    if (json_is_array(arch) && json_array_size(arch) > 0) {
        const char *a = json_string_value(json_array_get(arch, 0));
        if (a && strcmp(a, "CLIPTextModelWithProjection") == 0)
            c->with_projection = true;
        else if (!a || strcmp(a, "CLIPTextModel") != 0)
            return sd_cfg_unsupported(j, "architectures", "CLIPTextModel or CLIPTextModelWithProjection");
    }
    int64_t v;
    SD_TRY_J(sd_cfg_int(j, "vocab_size", 49408, &c->vocab_size));
    SD_TRY_J(sd_cfg_int(j, "hidden_size", 512, &c->hidden_size));
    SD_TRY_J(sd_cfg_int(j, "intermediate_size", 2048, &c->intermediate_size));
    SD_TRY_J(sd_cfg_int(j, "num_hidden_layers", 12, &c->n_layers));
    SD_TRY_J(sd_cfg_int(j, "num_attention_heads", 8, &c->n_heads));
    SD_TRY_J(sd_cfg_int(j, "max_position_embeddings", 77, &c->max_positions));
    SD_TRY_J(sd_cfg_int(j, "projection_dim", 512, &c->projection_dim));
    SD_TRY_J(sd_cfg_int(j, "bos_token_id", 49406, &v));
    c->bos_id = (int32_t)v;
    SD_TRY_J(sd_cfg_int(j, "eos_token_id", 49407, &v));
    c->eos_id = (int32_t)v;
    double eps;
    SD_TRY_J(sd_cfg_num(j, "layer_norm_eps", 1e-5, &eps));
    c->eps = (float)eps;
    SD_TRY_J(sd_cfg_str(j, "hidden_act", &s));
    if (!s || strcmp(s, "quick_gelu") == 0)
        c->act = RB_CLIP_ACT_QUICK_GELU;
    else if (strcmp(s, "gelu") == 0)
        c->act = RB_CLIP_ACT_GELU;
    else if (strcmp(s, "gelu_new") == 0 || strcmp(s, "gelu_pytorch_tanh") == 0)
        c->act = RB_CLIP_ACT_GELU_TANH;
    else
        return sd_cfg_unsupported(j, "hidden_act", "quick_gelu, gelu, gelu_new or gelu_pytorch_tanh");
    const struct { const char *key; int64_t v, max; } dims[] = {
        {"vocab_size", c->vocab_size, (int64_t)1 << 31},  {"hidden_size", c->hidden_size, 1 << 16},
        {"intermediate_size", c->intermediate_size, 1 << 18}, {"num_hidden_layers", c->n_layers, 1024},
        {"num_attention_heads", c->n_heads, 1024},         {"max_position_embeddings", c->max_positions, 1 << 16},
        {"projection_dim", c->projection_dim, 1 << 16},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > dims[i].max)
            return rb_error_set(j->err, RB_E_FORMAT, "%s: field '%s' = %lld is out of range [1, %lld]", j->path,
                                dims[i].key, (long long)dims[i].v, (long long)dims[i].max);
    if (c->hidden_size % c->n_heads)
        return rb_error_set(j->err, RB_E_FORMAT, "%s: num_attention_heads %lld does not divide hidden_size %lld",
                            j->path, (long long)c->n_heads, (long long)c->hidden_size);
    if (!(c->eps > 0.0f)) return rb_error_set(j->err, RB_E_FORMAT, "%s: layer_norm_eps must be > 0", j->path);
    return RB_OK;
}

rb_status rb_clip_text_config_load(const char *path, rb_clip_text_config *cfg, rb_error *err) {
    if (!path || !cfg) return rb_error_set(err, RB_E_INVALID, "clip text config: NULL argument");
    sd_cfg j;
    rb_status s = sd_cfg_open(&j, path, err);
    if (s != RB_OK) return s;
    s = parse(&j, cfg);
    sd_cfg_close(&j);
    return s;
}
