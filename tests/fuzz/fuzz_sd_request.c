/* libFuzzer target: the SD worker's request parsers on hostile bytes. The
 * first byte picks the path, the rest is its input: the rbee job body, an
 * A1111 txt2img / img2img body (with the options reader and the parameters
 * echo), an OpenAI generations body, an edits form (parts split at 0xFF
 * bytes, named from the fields the route reads, images decoded with their
 * alpha masks), an infotext for png-info, or base64. Every path must end
 * in a parsed request or field errors, without a crash or a leak. */
#include "worker/wk_base64.h"
#include "worker/wk_form.h"
#include "worker_sd/sd_a1111.h"
#include "worker_sd/sd_openai.h"
#include "worker_sd/sd_request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const sd_model_limits k_lim = {
    .max_size = 256, .default_width = 64, .default_height = 64, .default_steps = 20, .default_cfg = 7.5f, .vae_scale = 8};

static void form(const uint8_t *d, size_t n) {
    static const char *const names[] = {"image", "mask", "prompt", "n", "size", "seed", "strength", "output_format",
                                        "response_format", "steps", "image[]", "output_compression"};
    wk_form_part parts[16];
    wk_form f = {.parts = parts, .n = 0, .cap = 16};
    size_t start = 0;
    for (size_t i = 0; i <= n && f.n < 16; i++) {
        if (i < n && d[i] != 0xFF) continue;
        wk_form_part *p = &parts[f.n];
        memset(p, 0, sizeof *p);
        p->name = (char *)names[f.n % (sizeof names / sizeof names[0])];
        p->len = i - start;
        p->data = malloc(p->len + 1);
        if (!p->data) break;
        memcpy(p->data, d + start, p->len);
        p->data[p->len] = '\0';
        f.n++;
        start = i + 1;
    }
    sd_gen_request r;
    sd_request_init(&r, SD_API_OPENAI, &k_lim);
    wk_errors errs = {.n = 0};
    json_t *o = sd_openai_form(&f, &k_lim, &r, &errs);
    if (o) sd_openai_parse(o, true, &k_lim, &r, &errs);
    json_decref(o);
    sd_request_free(&r);
    for (size_t i = 0; i < f.n; i++) free(parts[i].data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] % 7;
    const char *body = (const char *)data + 1;
    const size_t n = size - 1;
    if (mode == 4) {
        char *t = malloc(n + 1);
        if (!t) return 0;
        memcpy(t, body, n);
        t[n] = '\0';
        json_decref(sd_infotext_parse(t));
        free(t);
        return 0;
    }
    if (mode == 5) {
        uint8_t *out = NULL;
        size_t len = 0, bad = 0;
        if (wk_base64_decode(body, n, 1 << 20, &out, &len, &bad) == WK_B64_OK) {
            char *back = wk_base64_encode(out, len);
            free(back);
        }
        free(out);
        return 0;
    }
    if (mode == 6) {
        form(data + 1, n);
        return 0;
    }
    wk_errors errs = {.n = 0};
    json_t *o = wk_parse_body(body, n, &errs);
    if (!o) return 0;
    sd_gen_request r;
    sd_request_init(&r, mode == 0 ? SD_API_RBEE : mode == 3 ? SD_API_OPENAI : SD_API_A1111, &k_lim);
    if (mode == 0) {
        sd_request_from_rbee(o, &k_lim, &r, &errs);
    } else if (mode == 3) {
        sd_openai_parse(o, false, &k_lim, &r, &errs);
    } else {
        sd_a1111_options opts;
        sd_a1111_options_init(&opts);
        sd_a1111_parse(o, mode == 2, &k_lim, &opts, "model", &r, &errs);
        json_decref(sd_a1111_parameters(o, &r, mode == 2));
        wk_errors e2 = {.n = 0};
        sd_a1111_options_apply(o, &opts, "model", "", &e2);
    }
    sd_request_free(&r);
    json_decref(o);
    return 0;
}
