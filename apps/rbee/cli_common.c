/* Implementation of cli_common.h. */
#include "cli_common.h"

#include "rbee/gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool load_tok_dir(const char *dir, rb_tokenizer **out, bool quiet_if_missing) {
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    if (!file_exists(tj)) {
        if (!quiet_if_missing) fprintf(stderr, "error: %s has no tokenizer.json\n", dir);
        return false;
    }
    rb_error err;
    rb_error_clear(&err);
    if (rb_tokenizer_load_hf(tj, file_exists(tc) ? tc : NULL, out, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return false;
    }
    return true;
}

bool cli_open_tokenizer(const char *path, rb_tokenizer **out) {
    *out = NULL;
    if (is_dir(path)) return load_tok_dir(path, out, false);
    rb_error err;
    rb_error_clear(&err);
    rb_gguf *g = NULL;
    if (rb_gguf_open(path, &g, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return false;
    }
    rb_status s = rb_tokenizer_load_gguf(g, out, &err);
    rb_gguf_close(g);
    if (s != RB_OK) {
        fprintf(stderr, "error: %s: %s\n", path, err.msg);
        return false;
    }
    return true;
}

bool cli_open_model(const char *path, const char *backend_spec, int threads, bool need_tokenizer, cli_model *out) {
    /* batch-invariant on the CPU, as llm-worker-rbee's default there, so that
     * rbee logits and generate compute a prompt as the worker does */
    const bool cpu = !backend_spec || strcmp(backend_spec, "cpu") == 0;
    rb_backend_config cfg = {.n_threads = threads, .cpu_isa = NULL, .batch_invariant = cpu};
    return cli_open_model_cfg(path, backend_spec, &cfg, need_tokenizer, out);
}

bool cli_open_model_cfg(const char *path, const char *backend_spec, const rb_backend_config *cfg, bool need_tokenizer,
                        cli_model *out) {
    memset(out, 0, sizeof *out);
    if (!path) {
        fprintf(stderr, "error: no model given (-m PATH)\n");
        return false;
    }
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(backend_spec ? backend_spec : "cpu", cfg, &out->be, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return false;
    }
    if (rb_model_load(path, out->be, NULL, &out->model, &err) != RB_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        cli_close_model(out);
        return false;
    }
    const rb_gguf *g = rb_model_gguf(out->model);
    bool ok = true;
    if (g) {
        if (rb_gguf_find_kv(g, "tokenizer.ggml.tokens")) {
            if (rb_tokenizer_load_gguf(g, &out->tok, &err) != RB_OK) {
                fprintf(stderr, "error: %s: %s\n", path, err.msg);
                ok = false;
            }
        }
    } else {
        load_tok_dir(path, &out->tok, true);
    }
    if (ok && need_tokenizer && !out->tok) {
        fprintf(stderr, "error: %s has no tokenizer\n", path);
        ok = false;
    }
    if (!ok) cli_close_model(out);
    return ok;
}

void cli_close_model(cli_model *cm) {
    rb_tokenizer_free(cm->tok);
    rb_model_free(cm->model);
    if (cm->be) rb_backend_destroy(cm->be);
    memset(cm, 0, sizeof *cm);
}

bool cli_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "error: %s expects an integer in [%lld, %lld], got '%s'\n", flag, (long long)lo, (long long)hi,
                s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "error: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

char *cli_read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > ((size_t)1 << 30)) { free(buf); return NULL; }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) { free(buf); return NULL; }
    buf[n] = '\0';
    *len = n;
    return buf;
}
