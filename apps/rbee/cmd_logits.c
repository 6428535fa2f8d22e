/* `rbee logits -m MODEL --tokens 1,2,3 [--out FILE]`: runs the tokens through
 * the model in one batch and writes the raw little-endian f32 logits of every
 * position (rows of n_vocab floats), for checks by other programs. Works on a
 * model folder without a tokenizer. */
#include "cli_common.h"
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: rbee logits -m MODEL --tokens ID,ID,... [--out FILE] [--backend SPEC] [--threads N]\n"
               "       [--kv-f32]\n\n"
               "Writes raw little-endian float32 logits, one row of n_vocab values per token, to FILE or stdout.\n");
}

static bool parse_tokens(const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, cnt = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return false;
    const char *p = s;
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "error: --tokens expects comma-separated non-negative integers, got '%s'\n", s);
            free(ids);
            return false;
        }
        if (cnt == cap) {
            int32_t *ni = realloc(ids, cap * 2 * sizeof *ids);
            if (!ni) { free(ids); return false; }
            ids = ni;
            cap *= 2;
        }
        ids[cnt++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (cnt == 0) {
        fprintf(stderr, "error: --tokens is empty\n");
        free(ids);
        return false;
    }
    *out = ids;
    *n = cnt;
    return true;
}

int rb_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *outp = NULL, *backend = NULL;
    int64_t threads = 0;
    bool kv_f32 = true;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"tokens", required_argument, 0, 't'},
        {"out", required_argument, 0, 'o'},   {"backend", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 'j'}, {"kv-f16", no_argument, 0, 1000},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:t:o:b:j:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 't': tokens = optarg; break;
        case 'o': outp = optarg; break;
        case 'b': backend = optarg; break;
        case 'j': if (!cli_parse_int("--threads", optarg, 0, 1024, &threads)) return 2; break;
        case 1000: kv_f32 = false; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || !tokens || optind != argc) {
        usage(stderr);
        return 2;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (!parse_tokens(tokens, &ids, &n)) return 2;
    cli_model cm;
    if (!cli_open_model(model, backend, (int)threads, false, &cm)) {
        free(ids);
        return 1;
    }
    int rc = 1;
    const rb_model_config *cfg = rb_model_get_config(cm.model);
    rb_kv_cache *kv = NULL;
    float *logits = NULL;
    rb_error err;
    rb_error_clear(&err);
    FILE *f = NULL;
    if (rb_kv_cache_create(cm.model, (int64_t)n, kv_f32 ? RB_F32 : RB_F16, &kv, &err) != RB_OK) goto done;
    logits = malloc(sizeof(float) * n * (size_t)cfg->n_vocab);
    if (!logits) { rb_error_set(&err, RB_E_NOMEM, "out of memory"); goto done; }
    if (rb_model_forward(cm.model, kv, ids, (int64_t)n, true, logits, &err) != RB_OK) goto done;
    f = outp ? fopen(outp, "wb") : stdout;
    if (!f) { rb_error_set(&err, RB_E_IO, "cannot open %s for writing", outp); goto done; }
    if (fwrite(logits, sizeof(float), n * (size_t)cfg->n_vocab, f) != n * (size_t)cfg->n_vocab || fflush(f) != 0) {
        rb_error_set(&err, RB_E_IO, "write failed");
        goto done;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", err.msg);
    if (f && f != stdout) fclose(f);
    free(logits);
    rb_kv_cache_free(kv);
    cli_close_model(&cm);
    free(ids);
    return rc;
}
