/* rb_quantize_gguf: GGUF -> GGUF in another weight type. Every kv is copied
 * (general.file_type replaced), 2-D and 3-D (expert stack) float/quantized
 * weights are decoded to f32 and re-encoded, 1-D tensors and expert routers
 * become f32, other tensors are copied as they are; one tensor at a time. */
#include "convert/convert.h"
#include "convert/requant_stream.h"
#include "rbee/gguf.h"
#include "rbee/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef enum q_action { Q_COPY, Q_TO_F32, Q_REQUANT } q_action;

static bool decodable(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && (tr->is_float || tr->is_quant) && t != RB_Q8_K && t != RB_Q8_1;
}

/* llama.cpp's expert routers stay f32 (requantizing them would move the routing). */
static bool is_router(const rb_gguf_tensor_info *ti) {
    static const char sfx[] = "ffn_gate_inp.weight";
    const size_t n = sizeof sfx - 1;
    return ti->name.len >= n && memcmp(ti->name.ptr + ti->name.len - n, sfx, n) == 0;
}

static q_action action_of(const rb_gguf_tensor_info *ti) {
    if (!decodable(ti->dtype)) return Q_COPY;
    return ti->n_dims >= 2 && !is_router(ti) ? Q_REQUANT : Q_TO_F32;
}

static rb_status write_meta(rb_gguf_writer *w, const rb_gguf *in, rb_dtype type, rb_error *err) {
    rb_status s = rb_gguf_writer_copy_kv(w, in, "general.file_type");
    if (s != RB_OK) return rb_error_set(err, s, "cannot copy metadata");
    if ((s = rb_gguf_writer_set_u32(w, "general.file_type", rb_convert_file_type(type))) != RB_OK)
        return rb_error_set(err, s, "cannot write general.file_type");
    if (!rb_gguf_find_kv(in, "general.quantization_version") &&
        (s = rb_gguf_writer_set_u32(w, "general.quantization_version", 2)) != RB_OK)
        return rb_error_set(err, s, "cannot write general.quantization_version");
    return RB_OK;
}

static rb_status run(rb_gguf *in, const char *out_path, const rb_convert_opts *opts, rb_convert_stats *stats,
                     rb_error *err) {
    const int64_t n = rb_gguf_n_tensors(in);
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
        const rb_gguf_tensor_info *ti = rb_gguf_tensor_at(in, i);
        if (!(names[i] = malloc((size_t)ti->name.len + 1))) {
            s = rb_error_set(err, RB_E_NOMEM, "out of memory");
            goto done;
        }
        memcpy(names[i], ti->name.ptr, (size_t)ti->name.len);
        names[i][ti->name.len] = '\0';
        rb_gguf_tensor_desc *d = &desc[i];
        d->name = names[i];
        d->n_dims = ti->n_dims;
        memcpy(d->ne, ti->ne, sizeof d->ne);
        switch (action_of(ti)) {
        case Q_COPY: d->dtype = ti->dtype; break;
        case Q_TO_F32: d->dtype = RB_F32; break;
        case Q_REQUANT:
            d->dtype = rb_convert_weight_dtype(opts->type, ti->ne[0], ti->n_dims == 3);
            if (d->dtype != rb_convert_intended_dtype(opts->type, ti->n_dims == 3)) {
                stats->n_fallback++;
                if (opts->log)
                    fprintf(opts->log, "warning: %s: row length %lld is not a multiple of the %s block size; "
                                       "writing f16\n", names[i], (long long)ti->ne[0],
                            rb_dtype_name(rb_convert_intended_dtype(opts->type, ti->n_dims == 3)));
            } else {
                stats->n_quantized++;
            }
            if (rb_dtype_info((int)ti->dtype)->is_quant && ti->dtype != d->dtype) n_lossy++;
            break;
        }
        int64_t nel = 1;
        for (int k = 0; k < RB_MAX_DIMS; k++) nel *= ti->ne[k];
        src[i] = (cv_requant_src){.data = ti->data, .nbytes = ti->nbytes, .dtype = ti->dtype, .nel = nel,
                                  .keep = d->dtype == ti->dtype && action_of(ti) != Q_REQUANT};
    }
    if (n_lossy && opts->log)
        fprintf(opts->log, "warning: %lld weights are already block-quantized; requantizing to %s cannot restore "
                           "the precision they lost\n", (long long)n_lossy, rb_dtype_name(opts->type));
    if ((s = rb_gguf_writer_create(&w, err)) != RB_OK) goto done;
    if ((s = write_meta(w, in, opts->type, err)) != RB_OK) goto done;
    s = cv_requant_write(out_path, w, desc, src, (size_t)n, opts, stats, err);
done:
    rb_gguf_writer_free(w);
    for (int64_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(src);
    free(desc);
    return s;
}

rb_status rb_quantize_gguf(const char *in_path, const char *out_path, const rb_convert_opts *opts,
                           rb_convert_stats *stats, rb_error *err) {
    rb_convert_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!in_path || !out_path || !opts) return rb_error_set(err, RB_E_INVALID, "quantize: NULL argument");
    if (!rb_convert_type_ok(opts->type))
        return rb_error_set(err, RB_E_INVALID, "quantize: cannot write weights as %s (supported: %s)",
                            rb_dtype_name(opts->type), rb_convert_type_list());
    struct stat si, so;
    if (stat(in_path, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return rb_error_set(err, RB_E_INVALID, "quantize: refusing to overwrite the input %s (name another output)",
                            in_path);
    rb_gguf *in = NULL;
    rb_status s = rb_gguf_open(in_path, &in, err);
    if (s != RB_OK) return s;
    s = run(in, out_path, opts, stats, err);
    if (s != RB_OK) rb_error_prefix(err, "%s: ", in_path);
    rb_gguf_close(in);
    return s;
}
