/* rb_convert_hf_to_gguf: reads a Hugging Face folder's config with the
 * models layer's parser (so the GGUF says exactly what loading the folder
 * would do), maps every tensor to its llama.cpp name, checks shapes, then
 * streams each tensor through f32 -> transform -> target type into the
 * output file (expert stacks one expert at a time). */
#include "convert/convert.h"
#include "convert/gguf_stream.h"
#include "convert/hf_metadata.h"
#include "convert/hf_tensor_map.h"
#include "convert/tensor_xform.h"
#include "models/model_internal.h"
#include "rbee/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct hf_job {
    const rb_convert_opts *opts;
    rb_model_config cfg;
    float *factors, *factors_long;
    rb_st_set *st;
    cv_hf_map map;
    const rb_st_tensor ***src; /* per map entry: its HF tensors (one, or one per expert); NULL if none */
    cv_tensor_desc *desc;
    size_t n_desc;
    size_t *desc_entry; /* map index of each desc */
} hf_job;

static rb_status load_config(hf_job *j, const char *dir, rb_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    rb_json_config *cfg = NULL, *gen = NULL;
    rb_status s = rb_json_config_load(path, &cfg, err);
    if (s != RB_OK) return s;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        rb_error gerr;
        if (rb_json_config_load(path, &gen, &gerr) != RB_OK) gen = NULL; /* optional file */
    }
    s = rb_model_config_from_hf(cfg, gen, &j->cfg, &j->factors, &j->factors_long, err);
    rb_json_config_free(cfg);
    rb_json_config_free(gen);
    return s;
}

static bool has_tensor(void *ud, const char *name) { return rb_st_find(ud, name) != NULL; }

static bool is_ignorable(const char *name) {
    size_t n = strlen(name);
    const char *sfx = "rotary_emb.inv_freq";
    return n >= strlen(sfx) && strcmp(name + n - strlen(sfx), sfx) == 0;
}

static bool float_dtype(rb_dtype t) { return t == RB_F32 || t == RB_F16 || t == RB_BF16 || t == RB_F64; }

/* t has exactly the n_dims-D shape ne (ggml order). */
static bool shape_is(const rb_st_tensor *t, int n_dims, const int64_t ne[3]) {
    if (t->n_dims != n_dims || t->ne[3] != 1) return false;
    for (int d = 0; d < 3; d++)
        if (t->ne[d] != (d < n_dims ? ne[d] : 1)) return false;
    return true;
}

static rb_status bad_shape(const rb_st_tensor *t, int n_dims, const int64_t ne[3], rb_error *err) {
    return rb_error_set(err, RB_E_FORMAT, "tensor '%s' has shape [%lld,%lld,%lld,%lld] (%d-D), expected [%lld,%lld,%lld] (%d-D)",
                        t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                        t->n_dims, (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1),
                        (long long)(n_dims > 2 ? ne[2] : 1), n_dims);
}

/* Finds entry e's HF tensors and checks their shapes and dtypes (*srcs
 * stays NULL for an absent optional tensor). */
static rb_status resolve(hf_job *j, const cv_hf_tensor *e, const rb_st_tensor ***srcs, rb_error *err) {
    const int64_t n = e->kind == CV_SRC_EXPERTS ? e->n_expert : 1;
    char name[256];
    *srcs = NULL;
    for (int64_t i = 0; i < n; i++) {
        if (e->kind == CV_SRC_EXPERTS) snprintf(name, sizeof name, "%s%lld%s", e->hf_name, (long long)i, e->hf_suffix);
        else snprintf(name, sizeof name, "%s", e->hf_name);
        const rb_st_tensor *t = rb_st_find(j->st, name);
        if (!t) {
            if (!e->required && i == 0) return RB_OK;
            return rb_error_set(err, RB_E_FORMAT, "missing tensor '%s' (for %s)", name, e->gguf_name);
        }
        bool ok;
        if (e->kind == CV_SRC_GATHER) ok = shape_is(t, e->src_dims, e->src_ne);
        else if (e->kind == CV_SRC_EXPERTS) ok = shape_is(t, 2, e->ne);
        else ok = shape_is(t, e->n_dims, e->ne);
        if (!ok) {
            const int64_t *want = e->kind == CV_SRC_GATHER ? e->src_ne : e->ne;
            return bad_shape(t, e->kind == CV_SRC_GATHER ? e->src_dims : e->kind == CV_SRC_EXPERTS ? 2 : e->n_dims,
                             want, err);
        }
        if (!float_dtype(t->dtype))
            return rb_error_set(err, RB_E_UNSUPPORTED, "tensor '%s' has dtype %s (expected a float type)", t->name,
                                rb_dtype_name(t->dtype));
        if (!*srcs && !(*srcs = calloc((size_t)n, sizeof **srcs))) return rb_error_set(err, RB_E_NOMEM, "out of memory");
        (*srcs)[i] = t;
    }
    if (e->kind == CV_SRC_GATHER) { /* every index the selection reads lies inside the tensor */
        const int64_t nel = e->src_ne[0] * e->src_ne[1] * e->src_ne[2];
        const int64_t last = e->off + (e->ne[0] - 1) * e->s[0] + (e->ne[1] - 1) * e->s[1] + (e->ne[2] - 1) * e->s[2];
        if (e->off < 0 || last >= nel)
            return rb_error_set(err, RB_E_INVALID, "'%s': selection outside '%s'", e->gguf_name, e->hf_name);
    }
    return RB_OK;
}

/* Resolves every map entry against the safetensors and builds the tensor list. */
static rb_status plan(hf_job *j, rb_convert_stats *stats, rb_error *err) {
    const size_t n = j->map.n;
    j->src = calloc(n ? n : 1, sizeof *j->src);
    j->desc = calloc(n ? n : 1, sizeof *j->desc);
    j->desc_entry = calloc(n ? n : 1, sizeof *j->desc_entry);
    if (!j->src || !j->desc || !j->desc_entry) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    FILE *log = j->opts->log;
    for (size_t i = 0; i < n; i++) {
        const cv_hf_tensor *e = &j->map.t[i];
        if (e->kind != CV_SRC_GENERATED) {
            rb_status s = resolve(j, e, &j->src[i], err);
            if (s != RB_OK) return s;
            if (!j->src[i]) continue; /* absent optional tensor */
        }
        cv_tensor_desc *d = &j->desc[j->n_desc];
        d->name = e->gguf_name;
        d->n_dims = e->n_dims;
        d->ne[0] = e->ne[0];
        d->ne[1] = e->ne[1];
        d->ne[2] = e->ne[2];
        d->ne[3] = 1;
        if (e->n_dims == 1 || e->keep_f32) {
            d->dtype = RB_F32;
        } else {
            const rb_dtype want = rb_convert_intended_dtype(j->opts->type, e->n_dims == 3);
            d->dtype = rb_convert_weight_dtype(j->opts->type, e->ne[0], e->n_dims == 3);
            if (d->dtype != want) {
                stats->n_fallback++;
                if (log)
                    fprintf(log, "warning: %s: row length %lld is not a multiple of the %s block size %lld; "
                                 "writing f16\n", e->gguf_name, (long long)e->ne[0], rb_dtype_name(want),
                            (long long)rb_dtype_info((int)want)->block_size);
            } else {
                stats->n_quantized++;
            }
        }
        j->desc_entry[j->n_desc++] = i;
    }
    /* tensors of the folder that nothing uses */
    for (int64_t k = 0; log && k < rb_st_n_tensors(j->st); k++) {
        const rb_st_tensor *t = rb_st_tensor_at(j->st, k);
        bool used = false;
        for (size_t i = 0; i < n && !used; i++) {
            const int64_t ns = j->map.t[i].kind == CV_SRC_EXPERTS ? j->map.t[i].n_expert : 1;
            for (int64_t x = 0; j->src[i] && x < ns && !used; x++) used = j->src[i][x] == t;
        }
        if (!used && !is_ignorable(t->name)) fprintf(log, "warning: ignoring tensor '%s'\n", t->name);
    }
    return RB_OK;
}

/* Elements [lo, lo + n) of HF tensor t as f32. */
static rb_status read_f32(const rb_st_tensor *t, int64_t lo, int64_t n, float *x, rb_error *err) {
    const size_t es = rb_dtype_info((int)t->dtype)->type_size;
    if (rb_dequantize_row(t->dtype, (const char *)t->data + (size_t)lo * es, x, n) != RB_OK)
        return rb_error_set(err, RB_E_FORMAT, "cannot read tensor '%s' (%s)", t->name, rb_dtype_name(t->dtype));
    return RB_OK;
}

/* Slice i2 ([ne0, ne1] values; experts one at a time) of entry e as f32 in x. */
static rb_status slice_f32(const cv_hf_tensor *e, const rb_st_tensor *const *srcs, int64_t i2, float *x, cv_buf *tmp,
                           rb_error *err) {
    const int64_t ne0 = e->ne[0], ne1 = e->ne[1], nel = ne0 * ne1;
    switch (e->kind) {
    case CV_SRC_GENERATED: memcpy(x, e->gen, sizeof(float) * (size_t)nel); return RB_OK;
    case CV_SRC_ONE: return read_f32(srcs[0], i2 * nel, nel, x, err);
    case CV_SRC_EXPERTS: return read_f32(srcs[i2], 0, nel, x, err);
    case CV_SRC_GATHER: break;
    }
    /* the span of source elements this slice reads, converted once, then picked */
    const int64_t lo = e->off + i2 * e->s[2], span = (ne0 - 1) * e->s[0] + (ne1 - 1) * e->s[1] + 1;
    if (cv_buf_reserve(tmp, sizeof(float) * (size_t)span) != RB_OK) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    rb_status s = read_f32(srcs[0], lo, span, tmp->p, err);
    if (s != RB_OK) return s;
    const float *src = tmp->p;
    for (int64_t i1 = 0; i1 < ne1; i1++)
        for (int64_t i0 = 0; i0 < ne0; i0++) x[i1 * ne0 + i0] = src[i1 * e->s[1] + i0 * e->s[0]];
    return RB_OK;
}

static rb_status convert_one(hf_job *j, size_t di, cv_stream *out, cv_buf *f32, cv_buf *enc, cv_buf *tmp,
                             rb_error *err) {
    const cv_tensor_desc *d = &j->desc[di];
    const size_t ei = j->desc_entry[di];
    const cv_hf_tensor *e = &j->map.t[ei];
    const int64_t ne0 = d->ne[0], rows = d->ne[1], nel = ne0 * rows;
    const size_t slice_bytes = rb_dtype_row_size(d->dtype, ne0) * (size_t)rows;
    if (cv_buf_reserve(f32, sizeof(float) * (size_t)nel) != RB_OK || cv_buf_reserve(enc, slice_bytes ? slice_bytes : 1) != RB_OK)
        return rb_error_set(err, RB_E_NOMEM, "out of memory for tensor '%s'", e->gguf_name);
    const rb_model_config *c = &j->cfg;
    for (int64_t i2 = 0; i2 < d->ne[2]; i2++) { /* one expert (or the whole matrix) at a time */
        float *x = f32->p;
        rb_status s = slice_f32(e, j->src[ei], i2, x, tmp, err);
        if (s != RB_OK) return s;
        if (e->xf == CV_XF_PERMUTE_Q || e->xf == CV_XF_PERMUTE_K) {
            const int64_t heads = e->xf == CV_XF_PERMUTE_Q ? c->n_head : c->n_head_kv;
            if (cv_buf_reserve(tmp, sizeof(float) * (size_t)(c->head_dim * ne0)) != RB_OK)
                return rb_error_set(err, RB_E_NOMEM, "out of memory");
            /* a bias is one column: its "rows" are the elements */
            const int64_t row_len = d->n_dims == 1 ? 1 : ne0;
            if (cv_permute_rope_rows(x, row_len, heads, c->head_dim, c->n_rot, tmp->p) != RB_OK)
                return rb_error_set(err, RB_E_INVALID, "cannot permute '%s'", e->gguf_name);
        } else if (e->xf == CV_XF_PLUS_ONE) {
            cv_add_one(x, nel);
        }
        s = cv_encode_rows(d->dtype, x, ne0, rows, enc->p);
        if (s != RB_OK) return rb_error_set(err, s, "cannot encode '%s' as %s", e->gguf_name, rb_dtype_name(d->dtype));
        if ((s = cv_stream_write_part(out, enc->p, slice_bytes, err)) != RB_OK) return s;
    }
    return RB_OK;
}

static const char *base_name(const char *dir, char *buf, size_t len) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, len, "%.*s", (int)(n - b), dir + b);
    return buf;
}

static rb_status run(hf_job *j, const char *hf_dir, const char *out_path, rb_convert_stats *stats, rb_error *err) {
    rb_status s;
    if ((s = load_config(j, hf_dir, err)) != RB_OK) return s;
    if ((s = rb_st_open(hf_dir, &j->st, err)) != RB_OK) return s;
    if ((s = cv_hf_map_build(&j->cfg, j->factors, j->factors_long, has_tensor, j->st, &j->map, err)) != RB_OK)
        return s;
    if ((s = plan(j, stats, err)) != RB_OK) return s;

    rb_gguf_writer *w = NULL;
    if ((s = rb_gguf_writer_create(&w, err)) != RB_OK) return s;
    char name[256];
    const char *gname = j->opts->name ? j->opts->name : base_name(hf_dir, name, sizeof name);
    s = cv_write_model_kv(w, &j->cfg, gname, j->opts->type, err);
    if (s == RB_OK) s = cv_write_tokenizer_kv(w, hf_dir, j->opts->log, err);
    cv_stream *out = NULL;
    if (s == RB_OK) s = cv_stream_begin(out_path, w, j->desc, j->n_desc, &out, err);
    rb_gguf_writer_free(w);
    if (s != RB_OK) return s;

    cv_buf f32 = {0}, enc = {0}, tmp = {0};
    for (size_t i = 0; i < j->n_desc && s == RB_OK; i++) {
        s = convert_one(j, i, out, &f32, &enc, &tmp, err);
        if (s == RB_OK && j->opts->progress)
            j->opts->progress(j->opts->progress_ud, (int64_t)i + 1, (int64_t)j->n_desc, j->desc[i].name);
    }
    cv_buf_free(&f32);
    cv_buf_free(&enc);
    cv_buf_free(&tmp);
    if (s != RB_OK) {
        cv_stream_abort(out);
        return s;
    }
    stats->n_tensors = (int64_t)j->n_desc;
    return cv_stream_finish(out, &stats->bytes_out, err);
}

rb_status rb_convert_hf_to_gguf(const char *hf_dir, const char *out_path, const rb_convert_opts *opts,
                                rb_convert_stats *stats, rb_error *err) {
    rb_convert_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!hf_dir || !out_path || !opts) return rb_error_set(err, RB_E_INVALID, "convert: NULL argument");
    if (!rb_convert_type_ok(opts->type))
        return rb_error_set(err, RB_E_INVALID, "convert: cannot write weights as %s (supported: %s)",
                            rb_dtype_name(opts->type), rb_convert_type_list());
    struct stat sb;
    if (stat(hf_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return rb_error_set(err, RB_E_NOT_FOUND, "'%s' is not a folder (expected a Hugging Face model folder)",
                            hf_dir);
    hf_job j;
    memset(&j, 0, sizeof j);
    j.opts = opts;
    rb_status s = run(&j, hf_dir, out_path, stats, err);
    if (s != RB_OK) rb_error_prefix(err, "%s: ", hf_dir);
    free(j.factors);
    free(j.factors_long);
    for (size_t i = 0; j.src && i < j.map.n; i++) free(j.src[i]);
    free(j.src);
    free(j.desc);
    free(j.desc_entry);
    cv_hf_map_free(&j.map);
    rb_st_close(j.st);
    return s;
}
