/* Loading the weights of one network component (see sd_weights.h): which
 * file of the folder, the name lookup with its spelling variants, the shape
 * and size checks and the placement on the backend in the dtype the tensor's
 * kind asks for (wrapped in place where the stored bytes are already what
 * the backend needs, converted or dequantized on the host otherwise). */
#include "sd/sd_weights.h"

#include "rbee/quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NAME_MAX_LEN 512

#define SD_W_TRY(expr)                                                                                         \
    do {                                                                                                       \
        rb_status sd_w_ = (expr);                                                                              \
        if (sd_w_ != RB_OK) return sd_w_;                                                                      \
    } while (0)

static bool file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static rb_status set_dtype(sd_weights *w, const rb_sd_load_opts *opts, rb_error *err) {
    rb_dtype dt = opts ? opts->weight_dtype : RB_F32;
    if (dt != RB_F32 && dt != RB_F16 && dt != RB_BF16)
        return rb_error_set(err, RB_E_UNSUPPORTED, "weight dtype %s is not supported (f32, f16 or bf16)",
                            rb_dtype_name(dt));
    w->mat_dtype = dt;
    return RB_OK;
}

rb_status sd_weights_init(sd_weights *w, rb_st_set *st, bool owns_st, sd_lookup_fn lookup, void *lookup_ctx,
                          const char *label, rb_backend *be, const rb_sd_load_opts *opts, rb_error *err) {
    memset(w, 0, sizeof *w);
    w->be = be;
    w->st = st;
    w->owns_st = owns_st;
    w->lookup = lookup ? lookup : sd_weights_find;
    w->lookup_ctx = lookup_ctx;
    snprintf(w->file, sizeof w->file, "%s", label ? label : "weights");
    return set_dtype(w, opts, err);
}

rb_status sd_weights_init_source(sd_weights *w, sd_tensor_owner *src, sd_lookup_fn lookup, void *lookup_ctx,
                                 const char *label, rb_backend *be, const rb_sd_load_opts *opts, rb_error *err) {
    memset(w, 0, sizeof *w);
    if (!src || !lookup) return rb_error_set(err, RB_E_INVALID, "sd weights: a source needs a lookup");
    w->be = be;
    w->src = src;
    sd_owner_ref(src);
    w->lookup = lookup;
    w->lookup_ctx = lookup_ctx;
    snprintf(w->file, sizeof w->file, "%s", label ? label : "weights");
    return set_dtype(w, opts, err);
}

rb_status sd_weights_open(sd_weights *w, const char *dir, const char *base, rb_backend *be,
                          const rb_sd_load_opts *opts, rb_error *err) {
    memset(w, 0, sizeof *w);
    w->be = be;
    w->lookup = sd_weights_find;
    w->owns_st = true;
    SD_W_TRY(set_dtype(w, opts, err));
    const bool fp16_first = opts && opts->variant && strcmp(opts->variant, "fp16") == 0;
    if (opts && opts->variant && opts->variant[0] && !fp16_first)
        return rb_error_set(err, RB_E_UNSUPPORTED, "weight variant '%s' is not supported (fp16 or none)", opts->variant);
    static const char *const plain[2] = {".safetensors", ".safetensors.index.json"};
    static const char *const half[2] = {".fp16.safetensors", ".safetensors.index.fp16.json"};
    const char *const *order[2] = {fp16_first ? half : plain, fp16_first ? plain : half};
    for (int v = 0; v < 2; v++)
        for (int k = 0; k < 2; k++) {
            char path[sizeof w->file];
            int n = snprintf(path, sizeof path, "%s/%s%s", dir, base, order[v][k]);
            if (n < 0 || (size_t)n >= sizeof path) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
            if (!file_exists(path)) continue;
            memcpy(w->file, path, (size_t)n + 1);
            return rb_st_open(path, &w->st, err);
        }
    return rb_error_set(err, RB_E_NOT_FOUND, "%s: no weights (%s.safetensors, %s.fp16.safetensors or their index)",
                        dir, base, base);
}

void sd_weights_close(sd_weights *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_bufs; i++) rb_buffer_free(w->bufs[i]);
    free(w->bufs);
    w->bufs = NULL;
    w->n_bufs = w->cap_bufs = 0;
    if (w->owns_st) rb_st_close(w->st);
    w->st = NULL;
    sd_owner_unref(w->src);
    w->src = NULL;
}

void sd_weights_release_files(sd_weights *w) {
    if (w->wrapped) return;
    if (w->owns_st) {
        rb_st_close(w->st);
        w->st = NULL;
    }
    sd_owner_unref(w->src);
    w->src = NULL;
}

/* Replaces the first occurrence of `from` in name by `to`; false if absent or too long. */
static bool replace(const char *name, const char *from, const char *to, char *out, size_t cap) {
    const char *p = strstr(name, from);
    if (!p) return false;
    int n = snprintf(out, cap, "%.*s%s%s", (int)(p - name), name, to, p + strlen(from));
    return n >= 0 && (size_t)n < cap;
}

const rb_st_tensor *sd_weights_find(const sd_weights *w, const char *name) {
    const rb_st_tensor *t = rb_st_find(w->st, name);
    if (t) return t;
    char alt[NAME_MAX_LEN];
    /* CLIP: transformers 5 saves CLIPTextModel without the text_model. prefix */
    static const char pfx[] = "text_model.";
    if (strncmp(name, pfx, sizeof pfx - 1) == 0) {
        if ((t = rb_st_find(w->st, name + sizeof pfx - 1))) return t;
    } else if (snprintf(alt, sizeof alt, "%s%s", pfx, name) < (int)sizeof alt && (t = rb_st_find(w->st, alt))) {
        return t;
    }
    /* VAE mid-block attention as saved by diffusers before 0.14 */
    static const char *const old[4][2] = {
        {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
    for (int i = 0; i < 4; i++)
        if (strstr(name, "mid_block.attentions.") && replace(name, old[i][0], old[i][1], alt, sizeof alt) &&
            (t = rb_st_find(w->st, alt)))
            return t;
    return NULL;
}

static const char *shape_str(int nd, const int64_t *ne, char *buf, size_t cap) {
    /* torch order: the reverse of ggml's */
    size_t o = 0;
    buf[o++] = '[';
    for (int i = nd - 1; i >= 0 && o < cap; i--)
        o += (size_t)snprintf(buf + o, cap - o, "%lld%s", (long long)ne[i], i ? ", " : "");
    if (o < cap - 1) {
        buf[o++] = ']';
        buf[o] = '\0';
    }
    buf[cap - 1] = '\0';
    return buf;
}

static rb_status own(sd_weights *w, rb_buffer *buf, rb_error *err) {
    if (w->n_bufs == w->cap_bufs) {
        size_t cap = w->cap_bufs ? 2 * w->cap_bufs : 256;
        rb_buffer **nb = realloc(w->bufs, cap * sizeof *nb);
        if (!nb) {
            rb_buffer_free(buf);
            return rb_error_set(err, RB_E_NOMEM, "out of memory");
        }
        w->bufs = nb;
        w->cap_bufs = cap;
    }
    w->bufs[w->n_bufs++] = buf;
    return RB_OK;
}

/* Dtypes a stored weight may have: the float types and the ggml block
 * formats of weights (not the activation formats q8_1 / q8_K). */
static bool storable(rb_dtype t) {
    if (t == RB_F32 || t == RB_F16 || t == RB_BF16) return true;
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && tr->is_quant && t != RB_Q8_1 && t != RB_Q8_K;
}

static bool is_quant(rb_dtype t) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t);
    return tr && tr->is_quant;
}

/* Elements of a stored tensor, -1 when the extents are negative or overflow. */
static int64_t n_elements(const rb_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims && d < RB_MAX_DIMS; d++) {
        if (t->ne[d] < 0 || (t->ne[d] > 0 && n > INT64_MAX / t->ne[d])) return -1;
        n *= t->ne[d];
    }
    return n;
}

/* The stored bytes are exactly n elements: whole blocks (rows of whole
 * blocks, or for a quantized tensor one run of whole blocks). */
static bool bytes_ok(const rb_st_tensor *t, int64_t n) {
    const rb_dtype_traits *tr = rb_dtype_info((int)t->dtype);
    if (!tr || n < 0 || n % tr->block_size) return false;
    const uint64_t blocks = (uint64_t)(n / tr->block_size);
    return blocks <= SIZE_MAX / tr->type_size && blocks * tr->type_size == t->nbytes;
}

/* Host conversion of n elements (a multiple of from's block size) of any
 * storable dtype to f32, f16 or bf16, through tmp (tmp_n floats, a multiple
 * of every block size). */
static rb_status convert(rb_dtype from, const void *src, rb_dtype to, void *dst, int64_t n, float *tmp,
                         int64_t tmp_n) {
    const rb_dtype_traits *tr = rb_dtype_info((int)from);
    for (int64_t i0 = 0; i0 < n; i0 += tmp_n) {
        const int64_t m = n - i0 < tmp_n ? n - i0 : tmp_n;
        const float *f = tmp;
        if (from == RB_F32) {
            f = (const float *)src + i0;
        } else if (from == RB_F16) {
            rb_f16_to_f32_row((const rb_f16 *)src + i0, tmp, m);
        } else if (from == RB_BF16) {
            rb_bf16_to_f32_row((const rb_bf16 *)src + i0, tmp, m);
        } else {
            const char *blk = (const char *)src + (size_t)(i0 / tr->block_size) * tr->type_size;
            rb_status s = rb_dequantize_row(from, blk, tmp, m);
            if (s != RB_OK) return s;
        }
        if (to == RB_F32)
            memcpy((float *)dst + i0, f, (size_t)m * sizeof(float));
        else if (to == RB_F16)
            rb_f32_to_f16_row(f, (rb_f16 *)dst + i0, m);
        else
            rb_f32_to_bf16_row(f, (rb_bf16 *)dst + i0, m);
    }
    return RB_OK;
}

#define CONVERT_CHUNK 4096 /* floats: a multiple of every block size (32, 256) */

static rb_status place(sd_weights *w, const char *name, const rb_st_tensor *t, int64_t n, rb_dtype to, int nd,
                       const int64_t *ne, rb_tensor *out, rb_error *err) {
    rb_buffer *buf = NULL;
    rb_status s;
    size_t bytes;
    if (t->dtype == to) {
        bytes = t->nbytes;
        s = rb_buffer_from_host(w->be, (void *)t->data, bytes, &buf);
        if (s == RB_OK && rb_buffer_host_ptr(buf) == t->data) w->wrapped = true;
    } else {
        bytes = rb_dtype_row_size(to, 1) * (size_t)n;
        void *host = malloc(bytes ? bytes : 1);
        float *tmp = malloc(CONVERT_CHUNK * sizeof(float));
        if (!host || !tmp) {
            free(host);
            free(tmp);
            return rb_error_set(err, RB_E_NOMEM, "out of memory converting '%s'", name);
        }
        s = convert(t->dtype, t->data, to, host, n, tmp, CONVERT_CHUNK);
        free(tmp);
        if (s != RB_OK) {
            free(host);
            return rb_error_set(err, RB_E_FORMAT, "%s: cannot decode tensor '%s' (%s)", w->file, name,
                                rb_dtype_name(t->dtype));
        }
        s = rb_buffer_alloc(w->be, bytes ? bytes : 1, &buf);
        if (s == RB_OK && bytes) s = rb_buffer_set(buf, 0, host, bytes);
        free(host);
    }
    if (s != RB_OK) {
        rb_buffer_free(buf);
        return rb_error_set(err, s, "cannot place '%s' on %s: %s", name, rb_backend_name(w->be),
                            rb_backend_last_error(w->be));
    }
    if ((s = own(w, buf, err)) != RB_OK) return s;
    if ((s = rb_buffer_set_constant(buf)) != RB_OK)
        return rb_error_set(err, s, "cannot mark '%s' constant: %s", name, rb_backend_last_error(w->be));
    w->bytes += bytes;
    return rb_tensor_init(out, to, nd, ne, buf, 0) == RB_OK ? RB_OK
                                                             : rb_error_set(err, RB_E_FORMAT, "bad shape for '%s'", name);
}

/* The dtype a stored tensor of this kind gets on the backend. */
static rb_dtype target_dtype(const sd_weights *w, const rb_st_tensor *t, sd_wkind kind, int nd) {
    switch (kind) {
    case SD_W_F32: return RB_F32;
    case SD_W_CONV: return w->mat_dtype == RB_F16 || w->mat_dtype == RB_BF16 ? w->mat_dtype : RB_F32;
    case SD_W_EMB: return w->mat_dtype;
    case SD_W_MAT:
        if (is_quant(t->dtype) && t->n_dims == nd && nd == 2 &&
            t->ne[0] % rb_dtype_info((int)t->dtype)->block_size == 0)
            return t->dtype; /* rows of whole blocks: rb_matmul takes it as it is */
        return w->mat_dtype;
    }
    return RB_F32;
}

rb_status sd_weights_get(sd_weights *w, const char *name, sd_wkind kind, int nd, const int64_t *ne, bool required,
                         rb_tensor *out, bool *present, rb_error *err) {
    char want[96], got[96];
    if (present) *present = false;
    const rb_st_tensor *t = w->lookup(w, name);
    if (!t) {
        if (!required) return RB_OK;
        return rb_error_set(err, RB_E_FORMAT, "%s: missing tensor '%s' (expected shape %s)", w->file, name,
                            shape_str(nd, ne, want, sizeof want));
    }
    if (!storable(t->dtype))
        return rb_error_set(err, RB_E_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s (f32, f16, bf16 or a ggml block format expected)", w->file,
                            name, rb_dtype_name(t->dtype));
    if (t->n_dims < 0 || t->n_dims > RB_MAX_DIMS)
        return rb_error_set(err, RB_E_FORMAT, "%s: tensor '%s' has %d dimensions", w->file, name, t->n_dims);
    int64_t full[RB_MAX_DIMS] = {1, 1, 1, 1};
    for (int i = 0; i < nd; i++) full[i] = ne[i];
    int64_t stored[RB_MAX_DIMS] = {1, 1, 1, 1};
    for (int i = 0; i < t->n_dims; i++) stored[i] = t->ne[i];
    bool ok = t->n_dims == nd && memcmp(stored, full, sizeof full) == 0;
    /* a linear weight stored as a 1x1 convolution kernel [out, in, 1, 1] */
    if (!ok && kind == SD_W_MAT && nd == 2 && t->n_dims == 4)
        ok = t->ne[0] == 1 && t->ne[1] == 1 && t->ne[2] == ne[0] && t->ne[3] == ne[1];
    if (!ok)
        return rb_error_set(err, RB_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s", w->file, name,
                            shape_str(t->n_dims, t->ne, got, sizeof got), shape_str(nd, ne, want, sizeof want));
    const int64_t n = n_elements(t);
    if (!bytes_ok(t, n))
        return rb_error_set(err, RB_E_FORMAT, "%s: tensor '%s' holds %zu bytes, which is not %lld %s elements",
                            w->file, name, t->nbytes, (long long)n, rb_dtype_name(t->dtype));
    rb_status s = place(w, name, t, n, target_dtype(w, t, kind, nd), nd, ne, out, err);
    if (s == RB_OK && present) *present = true;
    return s;
}
