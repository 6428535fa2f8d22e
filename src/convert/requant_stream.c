/* Implementation of requant_stream.h. */
#include "convert/requant_stream.h"
#include "convert/tensor_xform.h"
#include "rbee/quant.h"

rb_status cv_requant_write(const char *out_path, rb_gguf_writer *w, const rb_gguf_tensor_desc *desc,
                           const cv_requant_src *src, size_t n, const rb_convert_opts *opts, rb_convert_stats *stats,
                           rb_error *err) {
    rb_gguf_stream *out = NULL;
    rb_status s = rb_gguf_stream_begin(out_path, w, desc, n, &out, err);
    if (s != RB_OK) return s;
    cv_buf f32 = {0}, enc = {0};
    for (size_t i = 0; i < n && s == RB_OK; i++) {
        const cv_requant_src *t = &src[i];
        const size_t nbytes = rb_gguf_stream_tensor_bytes(out, i);
        if (t->keep && t->nbytes == nbytes) {
            s = rb_gguf_stream_write(out, t->data, t->nbytes, err);
        } else if (cv_buf_reserve(&f32, sizeof(float) * (size_t)t->nel + 1) != RB_OK ||
                   cv_buf_reserve(&enc, nbytes ? nbytes : 1) != RB_OK) {
            s = rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", desc[i].name);
        } else if (rb_dequantize_row(t->dtype, t->data, f32.p, t->nel) != RB_OK) {
            s = rb_error_set(err, RB_E_FORMAT, "cannot decode tensor '%s' (%s)", desc[i].name, rb_dtype_name(t->dtype));
        } else if ((s = cv_encode_rows(desc[i].dtype, f32.p, desc[i].ne[0], t->nel / desc[i].ne[0], enc.p)) != RB_OK) {
            rb_error_set(err, s, "cannot encode '%s' as %s", desc[i].name, rb_dtype_name(desc[i].dtype));
        } else {
            s = rb_gguf_stream_write(out, enc.p, nbytes, err);
        }
        if (s == RB_OK && opts->progress) opts->progress(opts->progress_ud, (int64_t)i + 1, (int64_t)n, desc[i].name);
    }
    cv_buf_free(&f32);
    cv_buf_free(&enc);
    if (s != RB_OK) {
        rb_gguf_stream_abort(out);
        return s;
    }
    stats->n_tensors = (int64_t)n;
    return rb_gguf_stream_finish(out, &stats->bytes_out, err);
}
