/* `rbee quantize` for Stable Diffusion GGUF files (sd_convert.h): every
 * tensor is re-encoded with the converter's dtype rules for the new target
 * (linear weights in the target type, convolution kernels f16, norms and
 * biases f32, ...) from its decoded values, or copied when its dtype and
 * shape stay; the file must open as an SD file first (sd_gguf.h), which
 * also gives ComfyUI-GGUF's flattened tensors their logical shapes. */
#include "sd/sd_convert.h"

#include "convert/requant_stream.h"
#include "rbee/gguf.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sd_convert_is_sd_gguf(const char *path) {
    rb_gguf *g = NULL;
    if (rb_gguf_open(path, &g, NULL) != RB_OK) return false;
    bool sd = rb_gguf_find_kv(g, "rbee.sd.family") != NULL;
    char *arch = NULL;
    if (rb_gguf_get_str(g, "general.architecture", &arch) == RB_OK) {
        sd |= strcmp(arch, "sd1") == 0 || strcmp(arch, "sdxl") == 0;
        free(arch);
    } else {
        static const char dm[] = "model.diffusion_model.";
        for (int64_t i = 0; i < rb_gguf_n_tensors(g) && !sd; i++) {
            const rb_gguf_tensor_info *t = rb_gguf_tensor_at(g, i);
            sd = t->name.len > sizeof dm && memcmp(t->name.ptr, dm, sizeof dm - 1) == 0;
        }
    }
    rb_gguf_close(g);
    return sd;
}

static rb_status run(sd_gguf *f, const char *out_path, const rb_convert_opts *opts, rb_convert_stats *stats,
                     rb_error *err) {
    const int64_t n = f->list.n;
    rb_gguf_tensor_desc *desc = calloc(n > 0 ? (size_t)n : 1, sizeof *desc);
    cv_requant_src *src = calloc(n > 0 ? (size_t)n : 1, sizeof *src);
    char **names = calloc(n > 0 ? (size_t)n : 1, sizeof *names);
    rb_gguf_writer *w = NULL;
    rb_status s = RB_OK;
    int64_t n_lossy = 0;
    if (!desc || !src || !names) {
        s = rb_error_set(err, RB_E_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(f->g, i);
        const rb_st_tensor *t = &f->list.t[i];
        if (!(names[i] = malloc((size_t)ti->name.len + 1))) {
            s = rb_error_set(err, RB_E_NOMEM, "out of memory");
            goto done;
        }
        memcpy(names[i], ti->name.ptr, (size_t)ti->name.len);
        names[i][ti->name.len] = '\0';
        bool fb = false;
        const sdc_class c = sdc_class_of(names[i], t->n_dims);
        desc[i] = (rb_gguf_tensor_desc){.name = names[i], .n_dims = t->n_dims};
        memcpy(desc[i].ne, t->ne, sizeof t->ne);
        desc[i].dtype = sdc_dtype(c, opts->type, t->ne[0], &fb);
        if (c == SDC_MAT) {
            if (fb) stats->n_fallback++;
            else stats->n_quantized++;
            if (fb && opts->log)
                fprintf(opts->log, "warning: %s: rows of %lld are not whole %s blocks; writing f16\n", names[i],
                        (long long)t->ne[0], rb_dtype_name(opts->type));
        }
        const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
        n_lossy += tr && tr->is_quant && desc[i].dtype != t->dtype;
        int64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++) nel *= t->ne[d];
        /* the file's own bytes go out unchanged when the dtype stays (t is the file's tensor) */
        src[i] = (cv_requant_src){.data = t->data, .nbytes = ti->nbytes, .dtype = t->dtype, .nel = nel,
                                  .keep = desc[i].dtype == ti->dtype && t->dtype == ti->dtype && t->data == ti->data};
    }
    if (n_lossy && opts->log)
        fprintf(opts->log, "warning: %lld tensors are block-quantized already; re-encoding them cannot restore the "
                           "precision they lost\n", (long long)n_lossy);
    if ((s = rb_gguf_writer_create(&w, err)) != RB_OK) goto done;
    if (rb_gguf_writer_copy_kv(w, f->g, "general.file_type") != RB_OK ||
        rb_gguf_writer_set_u32(w, "general.file_type", rb_convert_file_type(opts->type)) != RB_OK ||
        (!rb_gguf_find_kv(f->g, "general.quantization_version") &&
         rb_gguf_writer_set_u32(w, "general.quantization_version", 2) != RB_OK)) {
        s = rb_error_set(err, RB_E_NOMEM, "cannot copy the metadata");
        goto done;
    }
    s = cv_requant_write(out_path, w, desc, src, (size_t)n, opts, stats, err);
done:
    rb_gguf_writer_free(w);
    for (int64_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(src);
    free(desc);
    return s;
}

rb_status sd_requantize_gguf(const char *in_path, const char *out_path, const rb_convert_opts *opts,
                             rb_convert_stats *stats, rb_error *err) {
    rb_convert_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!in_path || !out_path || !opts) return rb_error_set(err, RB_E_INVALID, "quantize: NULL argument");
    if (!rb_convert_type_ok(opts->type))
        return rb_error_set(err, RB_E_INVALID, "quantize: cannot write weights as %s (supported: %s)",
                            rb_dtype_name(opts->type), rb_convert_type_list());
    sd_gguf *f = NULL;
    rb_status s = sd_gguf_open(in_path, &f, err);
    if (s != RB_OK) return s;
    s = run(f, out_path, opts, stats, err);
    if (s != RB_OK) rb_error_prefix(err, "%s: ", in_path);
    sd_gguf_unref(f);
    return s;
}
