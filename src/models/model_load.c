/* Opening a model: decides between a GGUF file and a Hugging Face folder,
 * reads the config, binds the weights on the backend, and owns everything it
 * opened until rb_model_free. */
#include "models/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static rb_status upload_rope_factors(rb_model *m, const float *f, rb_tensor *t, rb_error *err) {
    const int64_t ne[1] = {m->cfg.n_rot / 2};
    rb_status s = rb_tensor_alloc(m->be, RB_F32, 1, ne, t);
    if (s != RB_OK) return rb_error_set(err, s, "cannot allocate rope factors");
    if ((s = rb_model_own_buffer(m, t->buf)) != RB_OK) {
        rb_tensor_free(t);
        return rb_error_set(err, s, "out of memory");
    }
    s = rb_tensor_set(t, f, sizeof(float) * (size_t)ne[0]);
    if (s != RB_OK) return rb_error_set(err, s, "cannot upload rope factors");
    return RB_OK;
}

static rb_status load_hf(rb_model *m, const char *dir, rb_error *err) {
    char path[4096];
    const int plen = snprintf(path, sizeof path, "%s/generation_config.json", dir); /* the longer name */
    if (plen < 0 || (size_t)plen >= sizeof path)
        return rb_error_set(err, RB_E_INVALID, "model folder path is too long (%zu bytes)", strlen(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    rb_json_config *cfg = NULL, *gen = NULL;
    rb_status s = rb_json_config_load(path, &cfg, err);
    if (s != RB_OK) return s;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    struct stat st;
    if (stat(path, &st) == 0) {
        rb_error gerr;
        if (rb_json_config_load(path, &gen, &gerr) != RB_OK) gen = NULL; /* optional file: ignore if broken */
    }
    float *factors = NULL, *factors_long = NULL;
    s = rb_model_config_from_hf(cfg, gen, &m->cfg, &factors, &factors_long, err);
    rb_json_config_free(cfg);
    rb_json_config_free(gen);
    if (s != RB_OK) return s;
    m->hf_dir = strdup(dir);
    if (m->hf_dir && (s = rb_st_open(dir, &m->st, err)) == RB_OK && (s = rb_model_bind_hf(m, err)) == RB_OK) {
        if (factors) s = upload_rope_factors(m, factors, &m->rope_factors, err);
        if (s == RB_OK && factors_long) s = upload_rope_factors(m, factors_long, &m->rope_factors_long, err);
    } else if (!m->hf_dir) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    free(factors);
    free(factors_long);
    return s;
}

static rb_status load_gguf(rb_model *m, const char *path, rb_error *err) {
    rb_status s = rb_gguf_open(path, &m->gguf, err);
    if (s != RB_OK) return s;
    if ((s = rb_model_config_from_gguf(m->gguf, &m->cfg, err)) != RB_OK) return s;
    if ((s = rb_model_bind_gguf(m, err)) != RB_OK) return s;
    if (m->cfg.rope_yarn_factor > 0) { /* yarn: the factors follow from the metadata */
        float *f = malloc(sizeof(float) * (size_t)(m->cfg.n_rot / 2));
        if (!f) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        float attn = 1.0f;
        rb_rope_yarn_factors(&m->cfg, f, &attn);
        if (m->cfg.rope_attn_factor == 1.0f) m->cfg.rope_attn_factor = attn; /* unless the file gave one */
        s = upload_rope_factors(m, f, &m->rope_factors, err);
        free(f);
    }
    return s;
}

rb_status rb_model_load(const char *path, rb_backend *be, const rb_model_load_opts *opts, rb_model **out,
                        rb_error *err) {
    (void)opts;
    if (!path || !be || !out) return rb_error_set(err, RB_E_INVALID, "rb_model_load: NULL argument");
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return rb_error_set(err, RB_E_NOT_FOUND, "model '%s' does not exist", path);
    rb_model *m = calloc(1, sizeof *m);
    if (!m) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    m->be = be;
    rb_status s = S_ISDIR(st.st_mode) ? load_hf(m, path, err) : load_gguf(m, path, err);
    if (s != RB_OK) {
        if (err && !strstr(err->msg, path)) rb_error_prefix(err, "%s: ", path); /* name the path once */
        rb_model_free(m);
        return s;
    }
    /* weights are immutable from here on: backends may stream them ahead */
    for (size_t i = 0; i < m->n_bufs; i++) rb_buffer_set_constant(m->bufs[i]);
    *out = m;
    return RB_OK;
}

void rb_model_free(rb_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_bufs; i++) rb_buffer_free(m->bufs[i]);
    free(m->bufs);
    free(m->layers);
    rb_gguf_close(m->gguf);
    rb_st_close(m->st);
    free(m->hf_dir);
    free(m);
}

const rb_model_config *rb_model_get_config(const rb_model *m) { return &m->cfg; }
rb_backend *rb_model_backend(const rb_model *m) { return m->be; }
size_t rb_model_weight_bytes(const rb_model *m) { return m->weight_bytes; }
rb_dtype rb_model_weight_dtype(const rb_model *m) { return m->main_dtype; }
const struct rb_gguf *rb_model_gguf(const rb_model *m) { return m->gguf; }
const char *rb_model_hf_dir(const rb_model *m) { return m->hf_dir; }
