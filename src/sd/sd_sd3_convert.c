/* sd_sd3_convert_to_gguf (see sd_sd3_gguf.h): an SD3 single file to GGUF.
 * The file is mapped first (sd_sd3_build checks every part), its configs
 * made (sd_sd3_meta_make), then each tensor under the known prefixes is
 * streamed to the output under its own name: decoded to f32 and encoded in
 * the dtype its class and the target type give, one tensor in memory at a
 * time. */
#include "sd/sd_sd3_gguf.h"

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

/* Streams the chosen tensors of st with s's configs to out_path. */
static rb_status write_file(const rb_st_set *st, const sd_sd3 *s, const sd_sd3_meta *m, const char *out_path,
                            const char *name, const rb_convert_opts *opts, rb_convert_stats *stats, rb_error *err) {
    const int64_t nt = rb_st_n_tensors(st);
    rb_gguf_tensor_desc *desc = calloc(nt > 0 ? (size_t)nt : 1, sizeof *desc);
    const rb_st_tensor **src = calloc(nt > 0 ? (size_t)nt : 1, sizeof *src);
    if (!desc || !src) {
        free(desc);
        free(src);
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    size_t n = 0;
    rb_status r = RB_OK;
    for (int64_t i = 0; i < nt && r == RB_OK; i++) {
        const rb_st_tensor *t = rb_st_tensor_at(st, i);
        const bool fl = t->dtype == RB_F32 || t->dtype == RB_F16 || t->dtype == RB_BF16;
        if (!known(t->name) || !fl || t->n_dims < 1) {
            if (opts->log) fprintf(opts->log, "warning: skipping tensor '%s'\n", t->name);
            continue;
        }
        bool mat = false, fb = false;
        desc[n].name = t->name;
        desc[n].n_dims = t->n_dims;
        for (int d = 0; d < RB_MAX_DIMS; d++) desc[n].ne[d] = d < t->n_dims ? t->ne[d] : 1;
        desc[n].dtype = sd_sd3_gguf_dtype(t->name, t->n_dims, t->ne[0], opts->type, &mat, &fb);
        if (mat && fb) stats->n_fallback++;
        else if (mat) stats->n_quantized++;
        if (mat && fb && opts->log)
            fprintf(opts->log, "warning: %s: rows of %lld are not whole %s blocks; writing f16\n", t->name,
                    (long long)t->ne[0], rb_dtype_name(opts->type));
        src[n++] = t;
    }
    rb_gguf_writer *w = NULL;
    rb_gguf_stream *out = NULL;
    r = rb_gguf_writer_create(&w, err);
    if (r == RB_OK && (rb_gguf_writer_set_str(w, "general.architecture", "sd3") != RB_OK ||
                       rb_gguf_writer_set_str(w, "general.name", opts->name ? opts->name : name) != RB_OK ||
                       rb_gguf_writer_set_u32(w, "general.file_type", rb_convert_file_type(opts->type)) != RB_OK ||
                       rb_gguf_writer_set_u32(w, "general.quantization_version", 2) != RB_OK))
        r = rb_error_set(err, RB_E_NOMEM, "cannot write the general.* metadata");
    if (r == RB_OK) r = sd_sd3_meta_write(w, s, m, err);
    if (r == RB_OK) r = rb_gguf_stream_begin(out_path, w, desc, n, &out, err);
    rb_gguf_writer_free(w);
    cv_buf f32 = {0}, enc = {0};
    for (size_t i = 0; r == RB_OK && i < n; i++) {
        const rb_st_tensor *t = src[i];
        const int64_t ne = n_elem(t);
        const size_t nbytes = rb_gguf_stream_tensor_bytes(out, i);
        if (cv_buf_reserve(&f32, sizeof(float) * (size_t)(ne ? ne : 1)) != RB_OK ||
            cv_buf_reserve(&enc, nbytes ? nbytes : 1) != RB_OK) {
            r = rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", t->name);
            break;
        }
        if (rb_dequantize_row(t->dtype, t->data, f32.p, ne) != RB_OK) {
            r = rb_error_set(err, RB_E_FORMAT, "cannot read tensor '%s' (%s)", t->name, rb_dtype_name(t->dtype));
            break;
        }
        if ((r = cv_encode_rows(desc[i].dtype, f32.p, t->ne[0], ne / t->ne[0], enc.p)) != RB_OK) {
            rb_error_set(err, r, "cannot encode '%s' as %s", t->name, rb_dtype_name(desc[i].dtype));
            break;
        }
        if ((r = rb_gguf_stream_write(out, enc.p, nbytes, err)) != RB_OK) break;
        if (opts->progress) opts->progress(opts->progress_ud, (int64_t)i + 1, (int64_t)n, t->name);
    }
    cv_buf_free(&f32);
    cv_buf_free(&enc);
    if (r == RB_OK && out) {
        stats->n_tensors = (int64_t)n;
        r = rb_gguf_stream_finish(out, &stats->bytes_out, err);
    } else {
        rb_gguf_stream_abort(out);
    }
    free(desc);
    free(src);
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
    if (r == RB_OK) r = write_file(st, &s, &m, out_path, base_name(input, nb, sizeof nb), opts, stats, err);
    sd_sd3_free(&s);
    sd_tensor_list_free(&list);
    rb_st_close(st);
    if (r != RB_OK) rb_error_prefix(err, "%s: ", input);
    return r;
}
