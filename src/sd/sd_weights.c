/* Loading the weights of one diffusers component (see sd_weights.h): which
 * file of the folder, the name lookup with its spelling variants, the shape
 * check and the placement on the backend in the requested dtype (wrapped in
 * place where the stored bytes are already what the backend needs, converted
 * on the host otherwise). */
#include "sd/sd_weights.h"

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
}

void sd_weights_release_files(sd_weights *w) {
    if (w->wrapped || !w->owns_st) return;
    rb_st_close(w->st);
    w->st = NULL;
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

/* Host conversion of n elements between f32, f16 and bf16. */
static void convert(rb_dtype from, const void *src, rb_dtype to, void *dst, int64_t n, float *tmp, int64_t tmp_n) {
    for (int64_t i0 = 0; i0 < n; i0 += tmp_n) {
        const int64_t m = n - i0 < tmp_n ? n - i0 : tmp_n;
        const float *f;
        if (from == RB_F32) {
            f = (const float *)src + i0;
        } else {
            if (from == RB_F16)
                rb_f16_to_f32_row((const rb_f16 *)src + i0, tmp, m);
            else
                rb_bf16_to_f32_row((const rb_bf16 *)src + i0, tmp, m);
            f = tmp;
        }
        if (to == RB_F32)
            memcpy((float *)dst + i0, f, (size_t)m * sizeof(float));
        else if (to == RB_F16)
            rb_f32_to_f16_row(f, (rb_f16 *)dst + i0, m);
        else
            rb_f32_to_bf16_row(f, (rb_bf16 *)dst + i0, m);
    }
}

static rb_status place(sd_weights *w, const char *name, const rb_st_tensor *t, rb_dtype to, int nd, const int64_t *ne,
                       rb_tensor *out, rb_error *err) {
    const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
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
        float *tmp = malloc(4096 * sizeof(float));
        if (!host || !tmp) {
            free(host);
            free(tmp);
            return rb_error_set(err, RB_E_NOMEM, "out of memory converting '%s'", name);
        }
        convert(t->dtype, t->data, to, host, n, tmp, 4096);
        free(tmp);
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
    if (t->dtype != RB_F32 && t->dtype != RB_F16 && t->dtype != RB_BF16)
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: tensor '%s' has dtype %s (f32, f16 or bf16 expected)", w->file,
                            name, rb_dtype_name(t->dtype));
    int64_t full[RB_MAX_DIMS] = {1, 1, 1, 1};
    for (int i = 0; i < nd; i++) full[i] = ne[i];
    bool ok = t->n_dims == nd && memcmp(t->ne, full, sizeof full) == 0;
    /* a linear weight stored as a 1x1 convolution kernel [out, in, 1, 1] */
    if (!ok && kind == SD_W_MAT && nd == 2 && t->n_dims == 4)
        ok = t->ne[0] == 1 && t->ne[1] == 1 && t->ne[2] == ne[0] && t->ne[3] == ne[1];
    if (!ok)
        return rb_error_set(err, RB_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s", w->file, name,
                            shape_str(t->n_dims, t->ne, got, sizeof got), shape_str(nd, ne, want, sizeof want));
    rb_dtype to = RB_F32;
    if (kind == SD_W_MAT) to = w->mat_dtype;
    if (kind == SD_W_CONV && w->mat_dtype == RB_F16) to = RB_F16;
    rb_status s = place(w, name, t, to, nd, ne, out, err);
    if (s == RB_OK && present) *present = true;
    return s;
}
