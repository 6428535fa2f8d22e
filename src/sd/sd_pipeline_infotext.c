/* AUTOMATIC1111's "parameters" infotext for a generated image (the text
 * its PNG Info tab, civitai and most tools read back): the prompt, a
 * "Negative prompt:" line when there is one, then "Key: value" pairs joined
 * by ", " in A1111's order, values holding ',' ':' or a newline written as
 * JSON strings (its quote()), the whole text stripped of surrounding
 * whitespace. Numbers as Python prints them for what A1111 stores: ints
 * plainly, the CFG scale and the denoising strength as the shortest
 * decimal that reads back to the value (7.0 prints as 7, as A1111's
 * sliders give integers). */
#include "sd/sd_pipeline_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rb_sd_sampler_a1111_name(rb_sd_sampler_kind k) {
    switch (k) {
    case RB_SD_SAMPLER_EULER: return "Euler";
    case RB_SD_SAMPLER_EULER_A: return "Euler a";
    case RB_SD_SAMPLER_HEUN: return "Heun";
    case RB_SD_SAMPLER_DPMPP_2M: return "DPM++ 2M";
    case RB_SD_SAMPLER_DPMPP_SDE: return "DPM++ SDE";
    case RB_SD_SAMPLER_DDIM: return "DDIM";
    case RB_SD_SAMPLER_LCM: return "LCM";
    case RB_SD_SAMPLER_FLOW_EULER: return "Euler"; /* A1111 / Forge name SD3's flow-matching Euler so */
    default: return "unknown";
    }
}

const char *rb_sd_schedule_a1111_name(rb_sd_schedule s) {
    switch (s) {
    case RB_SD_SCHEDULE_DEFAULT: return "Automatic";
    case RB_SD_SCHEDULE_KARRAS: return "Karras";
    case RB_SD_SCHEDULE_EXPONENTIAL: return "Exponential";
    case RB_SD_SCHEDULE_SGM_UNIFORM: return "SGM Uniform";
    case RB_SD_SCHEDULE_SIMPLE: return "Simple";
    default: return "unknown";
    }
}

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *p, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void puts_(sbuf *b, const char *p) { put(b, p, strlen(p)); }

/* json.dumps(text, ensure_ascii=False) */
static void put_json(sbuf *b, const char *t) {
    puts_(b, "\"");
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        char e[8];
        switch (*p) {
        case '"': puts_(b, "\\\""); break;
        case '\\': puts_(b, "\\\\"); break;
        case '\n': puts_(b, "\\n"); break;
        case '\r': puts_(b, "\\r"); break;
        case '\t': puts_(b, "\\t"); break;
        case '\b': puts_(b, "\\b"); break;
        case '\f': puts_(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *p);
                puts_(b, e);
            } else {
                put(b, (const char *)p, 1);
            }
        }
    }
    puts_(b, "\"");
}

/* ", Key: value" (the first pair without the separator). */
static void pair(sbuf *b, bool *first, const char *key, const char *value) {
    if (!*first) puts_(b, ", ");
    *first = false;
    puts_(b, key);
    puts_(b, ": ");
    if (strpbrk(value, ",:\n"))
        put_json(b, value);
    else
        puts_(b, value);
}

static void pairf(sbuf *b, bool *first, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static void pairf(sbuf *b, bool *first, const char *key, const char *fmt, ...) {
    char v[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    pair(b, first, key, v);
}

/* Shortest %g that reads back to v (as a float when is_float). */
static void shortest(char *out, size_t cap, double v, bool is_float) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        double back = strtod(out, NULL);
        if (is_float ? (float)back == (float)v : back == v) return;
    }
}

rb_status rb_sd_infotext(const rb_sd_model *m, const rb_sd_params *p, const rb_sd_output *o, int index, char **text,
                         rb_error *err) {
    if (!text) return rb_error_set(err, RB_E_INVALID, "infotext: text is NULL");
    *text = NULL;
    if (!m || !p || !o) return rb_error_set(err, RB_E_INVALID, "infotext: NULL argument");
    if (index < 0 || (o->count > 0 && index >= o->count))
        return rb_error_set(err, RB_E_RANGE, "infotext: image %d of %d", index, o->count);
    sbuf b = {0};
    puts_(&b, p->prompt ? p->prompt : "");
    if (p->negative_prompt && p->negative_prompt[0]) {
        puts_(&b, "\nNegative prompt: ");
        puts_(&b, p->negative_prompt);
    }
    puts_(&b, "\n");
    bool first = true;
    char num[64];
    pairf(&b, &first, "Steps", "%d", o->steps);
    pair(&b, &first, "Sampler", rb_sd_sampler_a1111_name(o->sampler));
    pair(&b, &first, "Schedule type", rb_sd_schedule_a1111_name(o->schedule));
    shortest(num, sizeof num, (double)o->guidance_scale, true);
    pair(&b, &first, "CFG scale", num);
    pairf(&b, &first, "Seed", "%" PRIu64, o->seed);
    pairf(&b, &first, "Size", "%dx%d", o->width, o->height);
    if (m->name[0]) pair(&b, &first, "Model", m->name);
    if (o->img2img || o->inpaint) {
        shortest(num, sizeof num, o->strength, false);
        pair(&b, &first, "Denoising strength", num);
    }
    if (o->clip_skip > 0) pairf(&b, &first, "Clip skip", "%d", o->clip_skip + 1);
    if (o->rng != RB_TORCH_RNG_CUDA) pair(&b, &first, "RNG", "CPU");
    if (o->count > 1) {
        pairf(&b, &first, "Batch size", "%d", o->count);
        pairf(&b, &first, "Batch pos", "%d", index);
    }
    if (b.oom) {
        free(b.s);
        return rb_error_set(err, RB_E_NOMEM, "infotext: out of memory");
    }
    /* Python's str.strip() of the whole text */
    size_t s = 0, e = b.n;
    while (s < e && isspace((unsigned char)b.s[s])) s++;
    while (e > s && isspace((unsigned char)b.s[e - 1])) e--;
    memmove(b.s, b.s + s, e - s);
    b.s[e - s] = '\0';
    *text = b.s;
    return RB_OK;
}
