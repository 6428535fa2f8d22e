/* Writing an SD conversion plan (sd_convert.h) to GGUF: the metadata
 * (general.* keys as llama.cpp and ComfyUI-GGUF read them, the rbee.sd.*
 * configs), each tensor's dtype from its class and the target type, then
 * the tensors one at a time through the converters' streaming writer:
 * decoded to f32, made (copied, stacked, transposed, zeros), encoded. */
#include "sd/sd_convert.h"

#include "convert/gguf_stream.h"
#include "convert/tensor_xform.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t n_of(const int64_t *ne) { return ne[0] * ne[1] * ne[2] * ne[3]; }

static int64_t n_src(const rb_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

static rb_status decode(const rb_st_tensor *t, float *x, int64_t n, rb_error *err) {
    if (n_src(t) != n) return rb_error_set(err, RB_E_FORMAT, "tensor '%s' has %lld elements, %lld expected", t->name,
                                           (long long)n_src(t), (long long)n);
    if (rb_dequantize_row(t->dtype, t->data, x, n) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "cannot read tensor '%s' (%s)", t->name, rb_dtype_name(t->dtype));
    return RB_OK;
}

/* The f32 values of entry e into f32 (tmp: scratch of the same size). */
static rb_status values(const sdc_entry *e, cv_buf *f32, cv_buf *tmp, rb_error *err) {
    const int64_t n = n_of(e->ne);
    if (cv_buf_reserve(f32, sizeof(float) * (size_t)(n ? n : 1)) != RB_OK)
        return rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", e->name);
    float *x = f32->p;
    switch (e->op) {
    case SDC_COPY: return decode(e->src[0], x, n, err);
    case SDC_ZERO: memset(x, 0, sizeof(float) * (size_t)n); return RB_OK;
    case SDC_CAT3:
        for (int k = 0; k < 3; k++) {
            rb_status s = decode(e->src[k], x + k * (n / 3), n / 3, err);
            if (s != RB_OK) return s;
        }
        return RB_OK;
    case SDC_TRANSPOSE: {
        if (cv_buf_reserve(tmp, sizeof(float) * (size_t)(n ? n : 1)) != RB_OK)
            return rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", e->name);
        float *w = tmp->p;
        rb_status s = decode(e->src[0], w, n, err);
        if (s != RB_OK) return s;
        const int64_t P = e->ne[0], D = e->ne[1]; /* out [D rows of P]; w [P rows of D] */
        for (int64_t d = 0; d < D; d++)
            for (int64_t p = 0; p < P; p++) x[d * P + p] = w[p * D + d];
        return RB_OK;
    }
    }
    return rb_error_set(err, RB_E_INVALID, "unknown plan op");
}

static const char *base_name(const char *path, char *buf, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = n - b;
    const char *dot = memchr(path + b, '.', len);
    if (dot && dot > path + b) len = (size_t)(dot - (path + b)); /* sd15.safetensors -> sd15 */
    snprintf(buf, cap, "%.*s", (int)len, path + b);
    return buf;
}

static rb_status metadata(rb_gguf_writer *w, const sd_gguf_configs *cfg, const char *name, rb_dtype type,
                          rb_error *err) {
    char nb[256];
    if (rb_gguf_writer_set_str(w, "general.architecture", sd_gguf_arch_name(cfg->family)) != RB_OK ||
        rb_gguf_writer_set_str(w, "general.name", base_name(name, nb, sizeof nb)) != RB_OK ||
        rb_gguf_writer_set_u32(w, "general.file_type", rb_convert_file_type(type)) != RB_OK ||
        rb_gguf_writer_set_u32(w, "general.quantization_version", 2) != RB_OK)
        return rb_error_set(err, RB_E_NOMEM, "cannot write the general.* metadata");
    return sd_gguf_write_configs(w, cfg, err);
}

rb_status sdc_write(const sdc_plan *p, const sd_gguf_configs *cfg, const char *out_path, const char *name,
                    const rb_convert_opts *opts, rb_convert_stats *stats, rb_error *err) {
    cv_tensor_desc *desc = calloc(p->n ? p->n : 1, sizeof *desc);
    if (!desc) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        const sdc_entry *e = &p->e[i];
        bool fb = false;
        desc[i].name = e->name;
        desc[i].n_dims = e->n_dims;
        memcpy(desc[i].ne, e->ne, sizeof e->ne);
        const sdc_class c = sdc_class_of(e->name, e->n_dims);
        desc[i].dtype = sdc_dtype(c, opts->type, e->ne[0], &fb);
        if (c == SDC_MAT) {
            if (fb) stats->n_fallback++;
            else stats->n_quantized++;
            if (fb && opts->log)
                fprintf(opts->log, "warning: %s: rows of %lld are not whole %s blocks; writing f16\n", e->name,
                        (long long)e->ne[0], rb_dtype_name(opts->type));
        }
    }
    rb_gguf_writer *w = NULL;
    cv_stream *out = NULL;
    rb_status s = rb_gguf_writer_create(&w, err);
    if (s == RB_OK) s = metadata(w, cfg, name, opts->type, err);
    if (s == RB_OK) s = cv_stream_begin(out_path, w, desc, p->n, &out, err);
    rb_gguf_writer_free(w);
    cv_buf f32 = {0}, tmp = {0}, enc = {0};
    for (size_t i = 0; s == RB_OK && i < p->n; i++) {
        const sdc_entry *e = &p->e[i];
        const size_t nbytes = cv_stream_tensor_bytes(out, i);
        if ((s = values(e, &f32, &tmp, err)) != RB_OK) break;
        if (cv_buf_reserve(&enc, nbytes ? nbytes : 1) != RB_OK) {
            s = rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", e->name);
            break;
        }
        if ((s = cv_encode_rows(desc[i].dtype, f32.p, e->ne[0], n_of(e->ne) / e->ne[0], enc.p)) != RB_OK) {
            rb_error_set(err, s, "cannot encode '%s' as %s", e->name, rb_dtype_name(desc[i].dtype));
            break;
        }
        if ((s = cv_stream_write(out, enc.p, nbytes, err)) != RB_OK) break;
        if (opts->progress) opts->progress(opts->progress_ud, (int64_t)i + 1, (int64_t)p->n, e->name);
    }
    cv_buf_free(&f32);
    cv_buf_free(&tmp);
    cv_buf_free(&enc);
    if (s == RB_OK && out) {
        stats->n_tensors = (int64_t)p->n;
        s = cv_stream_finish(out, &stats->bytes_out, err);
    } else {
        cv_stream_abort(out);
    }
    free(desc);
    return s;
}
