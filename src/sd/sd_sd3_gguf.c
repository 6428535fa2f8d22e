/* Reading an SD3 GGUF file (sd_sd3_gguf.h): the tensors as a list with
 * NUL-terminated names and logical shapes (ComfyUI-GGUF's
 * comfy.gguf.orig_shape.* applied; a quantized tensor whose logical rows are
 * not whole blocks, which ComfyUI-GGUF stores as a flat run, is dequantized
 * to f32 here, since the mapping splits and swaps rows), mapped by the
 * single-file tables (sd_sd3_build), the rbee.sd3.* configs read and checked
 * against them (a file without them, as ComfyUI-GGUF writes SD3, gets the
 * configs the tensors show with the published models' head size). (The
 * networks' weights over the file: sd_sd3_gguf_weights in sd_sd3_nets.c, so
 * this file parses without the backends, as the fuzz target builds it.) */
#include "sd/sd_sd3_gguf.h"

#include "rbee/quant.h"
#include "sd/sd_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sd_sd3_gguf_is(const rb_gguf *g) {
    const rb_gguf_kv *kv = rb_gguf_find_kv(g, "general.architecture");
    if (!kv || kv->type != RB_GGUF_STRING) return false;
    const rb_gguf_str *a = kv->data;
    return a->len == 3 && memcmp(a->ptr, "sd3", 3) == 0;
}

static void destroy(sd_tensor_owner *o) {
    sd_sd3_gguf *f = (sd_sd3_gguf *)o;
    sd_sd3_free(&f->sd3);
    for (size_t i = 0; i < f->n_owned; i++) free(f->owned[i]);
    free(f->owned);
    for (int64_t i = 0; f->names && i < f->list.n; i++) free(f->names[i]);
    free(f->names);
    sd_tensor_list_free(&f->list);
    rb_gguf_close(f->g);
    free(f);
}

void sd_sd3_gguf_unref(sd_sd3_gguf *f) {
    if (f) sd_owner_unref(&f->src);
}

/* A quantized tensor whose logical rows are not whole blocks: an f32 copy
 * (owned by f). */
static rb_status dequantize_flat(sd_sd3_gguf *f, rb_st_tensor *t, rb_error *err) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    if (!tr || !tr->is_quant || t->ne[0] % tr->block_size == 0) return RB_OK;
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
    if (f->n_owned == f->cap_owned) {
        const size_t cap = f->cap_owned ? 2 * f->cap_owned : 8;
        void **q = realloc(f->owned, cap * sizeof *q);
        if (!q) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        f->owned = q;
        f->cap_owned = cap;
    }
    float *x = malloc((size_t)n * sizeof *x + 1);
    if (!x) return rb_error_set(err, RB_E_NOMEM, "out of memory dequantizing '%s'", t->name);
    f->owned[f->n_owned++] = x;
    if (rb_dequantize_row(t->dtype, t->data, x, n) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "tensor '%s' (%s) cannot be dequantized", t->name,
                            rb_dtype_name(t->dtype));
    t->dtype = RB_F32;
    t->data = x;
    t->nbytes = (size_t)n * sizeof *x;
    return RB_OK;
}

static rb_status build_list(sd_sd3_gguf *f, rb_error *err) {
    const int64_t n = rb_gguf_n_tensors(f->g);
    f->names = calloc(n > 0 ? (size_t)n : 1, sizeof *f->names);
    f->list.owned = calloc(n > 0 ? (size_t)n : 1, sizeof *f->list.owned);
    if (!f->names || !f->list.owned) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    f->list.t = f->list.owned;
    for (int64_t i = 0; i < n; i++) {
        rb_st_tensor *t = &f->list.owned[i];
        rb_status s = sd_gguf_tensor_entry(f->g, i, &f->names[i], t, err);
        f->list.n = f->names[i] ? i + 1 : i;
        if (s == RB_OK) s = dequantize_flat(f, t, err);
        if (s != RB_OK) return s;
    }
    return RB_OK;
}

static rb_status finish_open(rb_gguf *g, const char *label, sd_sd3_gguf **out, rb_error *err) {
    sd_sd3_gguf *f = calloc(1, sizeof *f);
    if (!f) {
        rb_gguf_close(g);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    snprintf(f->label, sizeof f->label, "%s", label);
    f->src.refs = 1;
    f->src.destroy = destroy;
    f->g = g;
    rb_status s = RB_OK;
    if (!sd_sd3_gguf_is(g))
        s = rb_error_set(err, RB_E_FORMAT, "not an SD3 GGUF file (general.architecture is not \"sd3\")");
    if (s == RB_OK) s = build_list(f, err);
    if (s == RB_OK) s = sd_sd3_build(&f->list, &f->sd3, err);
    if (s == RB_OK && rb_gguf_find_kv(g, "rbee.sd3.transformer.num_layers")) {
        s = sd_sd3_meta_read(g, &f->sd3, &f->meta, err);
    } else if (s == RB_OK && (s = sd_sd3_meta_make(&f->sd3, NULL, &f->meta, err)) != RB_OK) {
        rb_error_prefix(err, "the file carries no rbee.sd3.* configs and ");
    }
    if (s != RB_OK) {
        sd_sd3_gguf_unref(f);
        return s;
    }
    *out = f;
    return RB_OK;
}

rb_status sd_sd3_gguf_open(const char *path, sd_sd3_gguf **out, rb_error *err) {
    if (!out || !path) return rb_error_set(err, RB_E_INVALID, "sd3 gguf: NULL argument");
    *out = NULL;
    rb_gguf *g = NULL;
    rb_status s = rb_gguf_open(path, &g, err); /* its messages name the file */
    if (s == RB_OK && (s = finish_open(g, path, out, err)) != RB_OK) rb_error_prefix(err, "%s: ", path);
    return s;
}

rb_status sd_sd3_gguf_open_memory(const void *data, size_t size, sd_sd3_gguf **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd3 gguf: out is NULL");
    *out = NULL;
    rb_gguf *g = NULL;
    rb_status s = rb_gguf_open_memory(data, size, &g, err);
    return s == RB_OK ? finish_open(g, "<memory>", out, err) : s;
}

const sd_name_map *sd_sd3_part_map(const sd_sd3 *s, sd_sd3_part part) {
    if (!(s->present & part)) return NULL;
    switch (part) {
    case SD_SD3_MMDIT: return &s->mmdit;
    case SD_SD3_VAE: return &s->ldm.vae;
    case SD_SD3_CLIP_L: return &s->ldm.text1;
    case SD_SD3_CLIP_G: return &s->ldm.text2;
    case SD_SD3_T5: return &s->t5;
    }
    return NULL;
}
