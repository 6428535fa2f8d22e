/* Random-weight models at real shapes (rb_sd_model_create_random, for
 * `rbee bench-sd --random`): every tensor of the published configs
 * (sd_enum_*, sd_load_enum.c) filled with deterministic values scaled by
 * 1/sqrt(fan_in) (norm weights 1, biases 0), stored in the load dtype and
 * bound through the same sd_weights lookup hook a single-file checkpoint
 * uses, by the networks' own create functions (the names and shapes they
 * ask for are the enumeration's). Each tensor is allocated once, in its
 * final dtype, and filled in 4096-value chunks by up to one thread per CPU
 * (fill_parallel); on a backend that copies
 * them (GPUs) the SD3 builder frees each network's host weights once it is
 * built. SD3 presets (sd3m, sd35m)
 * add the MMDiT and the T5-XXL encoder (sd_random_sd3); with no tokenizer
 * folder their T5 has no tokenizer and encodes every prompt as the empty
 * one (same cost: the encoder always runs max_sequence_length tokens). */
#include "sd/sd_pipeline_internal.h"

#include "sd/sd_blocks.h"
#include "sd/sd_nets.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fill_ctx {
    sd_name_map *map;
    rb_dtype dtype; /* of matrices and kernels; 1-D tensors are f32 */
    uint64_t seed, index;
    size_t bytes;
} fill_ctx;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n uniform values in [-scale, scale) from xorshift64* (two per draw). */
static void uniform(uint64_t *st, float *out, size_t n, float scale) {
    uint64_t x = *st;
    for (size_t i = 0; i < n; i += 2) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        const uint64_t r = x * 0x2545f4914f6cdd1dull;
        out[i] = scale * ((float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f);
        if (i + 1 < n) out[i + 1] = scale * ((float)((r >> 16) & 0xffffff) * (2.0f / 16777216.0f) - 1.0f);
    }
    *st = x;
}

/* One tensor's values: blocks of FILL_BLOCK values, each from its own
 * xorshift stream seeded by (tensor seed, block index), so the values do
 * not depend on how many threads fill them. Generating is cheap; the first
 * write's page faults are most of the time. */
#define FILL_BLOCK ((int64_t)1 << 20)
#define FILL_MAX_THREADS 32

typedef struct fill_job {
    void *data;
    rb_dtype dt;
    int64_t numel;
    uint64_t seed;
    float scale, base; /* scale 0: every value is base */
    int stride, first; /* this thread's blocks: first, first + stride, ... */
} fill_job;

/* f32 -> f16 / bf16 by truncation, f16 values below its normal range to 0:
 * any rounding serves random weights, and this loop vectorizes (the exact
 * conversions of dtype.c are several times slower on 7.5 B values). The
 * values here are within +-1, so the f16 exponent cannot overflow. */
static void to_half(const float *src, uint16_t *dst, size_t n, bool f16) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        if (!f16) {
            dst[i] = (uint16_t)(u >> 16);
            continue;
        }
        const uint32_t e = (u >> 23) & 0xffu, sign = (u >> 16) & 0x8000u;
        dst[i] = (uint16_t)(e < 113u ? sign : sign | ((e - 112u) << 10) | ((u >> 13) & 0x3ffu));
    }
}

static void fill_block(const fill_job *j, int64_t b) {
    uint64_t s = j->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(b + 1));
    (void)splitmix(&s);
    s = splitmix(&s) | 1u; /* xorshift state: never 0 */
    const int64_t end = (b + 1) * FILL_BLOCK < j->numel ? (b + 1) * FILL_BLOCK : j->numel;
    float chunk[4096];
    for (int64_t i0 = b * FILL_BLOCK; i0 < end; i0 += 4096) {
        const size_t m = (size_t)(end - i0 < 4096 ? end - i0 : 4096);
        if (j->scale != 0.0f)
            uniform(&s, chunk, m, j->scale);
        else
            for (size_t i = 0; i < m; i++) chunk[i] = j->base;
        if (j->dt == RB_F32)
            memcpy((float *)j->data + i0, chunk, m * sizeof(float));
        else
            to_half(chunk, (uint16_t *)j->data + i0, m, j->dt == RB_F16);
    }
}

static void *fill_thread(void *arg) {
    const fill_job *j = arg;
    const int64_t nb = (j->numel + FILL_BLOCK - 1) / FILL_BLOCK;
    for (int64_t b = j->first; b < nb; b += j->stride) fill_block(j, b);
    return NULL;
}

/* Large tensors on up to one thread per online CPU (SD3-medium's 7.5 B
 * values would take a minute on one); a thread that cannot start has its
 * blocks filled by the caller. */
static void fill_parallel(fill_job *job) {
    const int64_t nb = (job->numel + FILL_BLOCK - 1) / FILL_BLOCK;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(ncpu < 1 ? 1 : ncpu > FILL_MAX_THREADS ? FILL_MAX_THREADS : ncpu);
    if (n > nb) n = (int)nb;
    fill_job jobs[FILL_MAX_THREADS];
    pthread_t th[FILL_MAX_THREADS];
    bool started[FILL_MAX_THREADS] = {false};
    for (int t = 0; t < n; t++) {
        jobs[t] = *job;
        jobs[t].stride = n;
        jobs[t].first = t;
        if (t > 0) started[t] = pthread_create(&th[t], NULL, fill_thread, &jobs[t]) == 0;
    }
    (void)fill_thread(&jobs[0]);
    for (int t = 1; t < n; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            (void)fill_thread(&jobs[t]);
    }
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static rb_status fill_one(void *vctx, const char *name, int nd, const int64_t *shape, rb_error *err) {
    fill_ctx *f = vctx;
    int64_t numel = 1, fan_in = 1;
    for (int d = 0; d < nd; d++) {
        if (shape[d] < 1) return rb_error_set(err, RB_E_INVALID, "random weights: %s has an empty dimension", name);
        numel *= shape[d];
        if (d > 0) fan_in *= shape[d];
    }
    const rb_dtype dt = nd >= 2 ? f->dtype : RB_F32;
    const size_t es = rb_dtype_row_size(dt, 1);
    if ((uint64_t)numel > ((uint64_t)1 << 40) / es) return rb_error_set(err, RB_E_RANGE, "random weights: %s too large", name);
    void *data = malloc((size_t)numel * es);
    if (!data) return rb_error_set(err, RB_E_NOMEM, "random weights: out of memory for %s", name);
    float scale = 0.0f, base = 0.0f;
    if (nd == 1) {
        base = ends_with(name, ".weight") ? 1.0f : 0.0f; /* norm weights 1, biases 0 */
    } else if (strstr(name, "embedding.weight") && strstr(name, "text_model.")) {
        scale = 0.02f * 1.7320508f; /* token / position tables: std 0.02 */
    } else {
        scale = sqrtf(3.0f / (float)fan_in); /* uniform with std 1/sqrt(fan_in) */
    }
    fill_job job = {.data = data, .dt = dt, .numel = numel, .seed = f->seed ^ (0x5851f42d4c957f2dull * ++f->index),
                    .scale = scale, .base = base};
    fill_parallel(&job);
    rb_st_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.n_dims = nd;
    for (int d = 0; d < RB_MAX_DIMS; d++) t.ne[d] = 1;
    for (int d = 0; d < nd; d++) t.ne[d] = shape[nd - 1 - d];
    t.nbytes = (size_t)numel * es;
    f->bytes += t.nbytes;
    return sd_name_map_add_owned(f->map, name, &t, data, err);
}

static const rb_st_tensor *map_lookup(const sd_weights *w, const char *name) {
    return sd_name_map_find((const sd_name_map *)w->lookup_ctx, name);
}

static rb_status bind_random(rb_sd_model *m, sd_name_map *map, const char *label, const rb_sd_load_opts *lo,
                             sd_weights *ws, rb_error *err) {
    return sd_weights_init(ws, NULL, false, map_lookup, map, label, m->be, lo, err);
}

/* Whether the backend's tensors made from host memory point into it (the
 * CPU) or are copies (GPUs): with copies the host weights are freed as soon
 * as a network is built, so the model is not held twice. */
static bool wraps_host(rb_backend *be) {
    void *probe = malloc(4096);
    rb_buffer *b = NULL;
    bool wraps = true; /* unknown: keep the host copies */
    if (probe && rb_buffer_from_host(be, probe, 4096, &b) == RB_OK) {
        wraps = rb_buffer_host_ptr(b) == probe;
        rb_buffer_free(b);
    }
    free(probe);
    return wraps;
}

static rb_status new_random(rb_backend *be, const char *preset, rb_sd_arch arch, rb_sd_model **out, rb_error *err) {
    rb_status s = sd_model_new(be, "random", preset, out, err);
    if (s != RB_OK) return s;
    (*out)->arch = arch;
    (*out)->ldm = calloc(1, sizeof *(*out)->ldm);
    if (!(*out)->ldm) {
        rb_sd_model_free(*out);
        *out = NULL;
        return rb_error_set(err, RB_E_NOMEM, "out of memory");
    }
    return RB_OK;
}

static rb_status sd3_tokenizers(rb_sd_model *m, const char *tok_dir, const rb_sd_model_opts *opts, rb_error *err) {
    if (!tok_dir) return sd_model_default_tokenizers(m, opts ? opts->vocab_path : NULL, NULL, false, err);
    static const char *const sub[2] = {"tokenizer", "tokenizer_2"};
    char p[1024];
    for (int i = 0; i < 2; i++) {
        if (!sd_name(p, sizeof p, "%s/%s", tok_dir, sub[i])) return rb_error_set(err, RB_E_INVALID, "path too long");
        SDP_TRY(rb_clip_tokenizer_load_dir(p, &m->enc[i].tok, err));
        m->enc[i].open_clip = rb_clip_pad_id(m->enc[i].tok) != rb_clip_eos_id(m->enc[i].tok);
    }
    if (!m->t5.enc) return RB_OK;
    if (!sd_name(p, sizeof p, "%s/tokenizer_3", tok_dir)) return rb_error_set(err, RB_E_INVALID, "path too long");
    return rb_unigram_load_dir(p, &m->t5.tok, err);
}

rb_status sd_random_sd3(const sd3_random_cfg *c, const char *label, rb_backend *be, const rb_sd_model_opts *opts,
                        const char *tok_dir, uint64_t seed, rb_sd_model **out, rb_error *err) {
    rb_sd_model *m = NULL;
    rb_status s = new_random(be, label, RB_SD_ARCH_SD3, &m, err);
    if (s != RB_OK) return s;
    if ((s = sd_default_sched_sd3(&m->sched, err)) != RB_OK) goto fail;
    m->mmdit_cfg = c->mmdit;
    m->vae_cfg = c->vae;
    m->has_mmdit_cfg = m->has_vae_cfg = true;
    m->n_enc = 2;
    m->enc[0].cfg = c->clip[0];
    m->enc[1].cfg = c->clip[1];
    m->enc[1].open_clip = true;
    snprintf(m->enc[0].comp, sizeof m->enc[0].comp, "text_encoder");
    snprintf(m->enc[1].comp, sizeof m->enc[1].comp, "text_encoder_2");
    m->force_zeros = false;
    m->default_w = m->default_h = (int)(c->mmdit.sample_size << (c->vae.n_levels - 1));
    const unsigned comp = sd_opts_components(opts);
    rb_sd_load_opts lo;
    sd_net_opts(opts, &lo);
    fill_ctx f = {.dtype = lo.weight_dtype, .seed = seed};
    sd_weights ws;
    char name[96];
    const bool keep = wraps_host(be);
    m->sd3_has_t5 = true;
    if (comp & RB_SD_LOAD_TEXT) {
        for (int i = 0; i < 2; i++) {
            f.map = i == 0 ? &m->ldm->text1 : &m->ldm->text2;
            if ((s = sd_enum_clip(&m->enc[i].cfg, fill_one, &f, err)) != RB_OK) goto fail;
            snprintf(name, sizeof name, "random %s text encoder %d", label, i + 1);
            if ((s = bind_random(m, f.map, name, &lo, &ws, err)) != RB_OK ||
                (s = sd_clip_text_create(&m->enc[i].cfg, &ws, &m->enc[i].enc, err)) != RB_OK)
                goto fail;
            if (!keep) sd_name_map_free(f.map);
        }
        if (!(opts && opts->no_t5)) {
            f.map = &m->ldm->t5;
            if ((s = sd_enum_t5(&c->t5, fill_one, &f, err)) != RB_OK) goto fail;
            snprintf(name, sizeof name, "random %s t5", label);
            if ((s = bind_random(m, f.map, name, &lo, &ws, err)) != RB_OK ||
                (s = sd_t5_create(&c->t5, &ws, &m->t5.enc, err)) != RB_OK)
                goto fail;
            if (!keep) sd_name_map_free(f.map);
        }
    }
    if ((s = sd3_tokenizers(m, tok_dir, opts, err)) != RB_OK) goto fail;
    if (comp & RB_SD_LOAD_UNET) {
        f.map = &m->ldm->unet;
        if ((s = sd_enum_mmdit(&c->mmdit, fill_one, &f, err)) != RB_OK) goto fail;
        snprintf(name, sizeof name, "random %s transformer", label);
        if ((s = bind_random(m, f.map, name, &lo, &ws, err)) != RB_OK ||
            (s = sd_mmdit_create(&c->mmdit, &ws, &m->mmdit, err)) != RB_OK)
            goto fail;
        if (!keep) sd_name_map_free(f.map);
    }
    if (comp & (RB_SD_LOAD_VAE_DECODER | RB_SD_LOAD_VAE_ENCODER)) {
        m->vae_cfg.decoder_only = !(comp & RB_SD_LOAD_VAE_ENCODER);
        f.map = &m->ldm->vae;
        if ((s = sd_enum_vae(&m->vae_cfg, fill_one, &f, err)) != RB_OK) goto fail;
        snprintf(name, sizeof name, "random %s vae", label);
        if ((s = bind_random(m, f.map, name, &lo, &ws, err)) != RB_OK ||
            (s = sd_vae_create(&m->vae_cfg, &ws, &m->vae, err)) != RB_OK)
            goto fail;
        if (!keep) sd_name_map_free(f.map);
    }
    m->components = comp;
    if ((s = sd_model_finish(m, opts, err)) != RB_OK) goto fail;
    *out = m;
    return RB_OK;
fail:
    rb_sd_model_free(m);
    return s;
}

rb_status rb_sd_model_create_random(const char *preset, rb_backend *be, const rb_sd_model_opts *opts, uint64_t seed,
                                    rb_sd_model **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd random model: out is NULL");
    *out = NULL;
    if (!preset || !be) return rb_error_set(err, RB_E_INVALID, "sd random model: NULL argument");
    rb_sd_arch arch;
    rb_sd_family fam;
    if (strcmp(preset, "sd15") == 0) {
        arch = RB_SD_ARCH_SD1;
        fam = RB_SD_FAMILY_SD1;
    } else if (strcmp(preset, "sd21") == 0) {
        arch = RB_SD_ARCH_SD2;
        fam = RB_SD_FAMILY_SD2_V;
    } else if (strcmp(preset, "sdxl") == 0) {
        arch = RB_SD_ARCH_SDXL;
        fam = RB_SD_FAMILY_SDXL;
    } else if (strcmp(preset, "sd3m") == 0 || strcmp(preset, "sd35m") == 0) {
        sd3_random_cfg c;
        sd_default_mmdit(preset[3] == '5', &c.mmdit);
        sd_default_t5_xxl(&c.t5);
        sd_default_vae_sd3(&c.vae);
        sd_default_clip_sd3(&c.clip[0], &c.clip[1]);
        return sd_random_sd3(&c, preset, be, opts, NULL, seed, out, err);
    } else {
        return rb_error_set(err, RB_E_INVALID, "unknown random model '%s' (sd15, sd21, sdxl, sd3m or sd35m)", preset);
    }
    rb_sd_model *m = NULL;
    rb_status s = new_random(be, preset, arch, &m, err);
    if (s != RB_OK) return s;
    m->ldm->family = arch == RB_SD_ARCH_SD1 ? SD_FAMILY_SD1 : arch == RB_SD_ARCH_SD2 ? SD_FAMILY_SD2 : SD_FAMILY_SDXL;
    if ((s = rb_sd_sched_config_family(&m->sched, fam, err)) != RB_OK) goto fail;
    sd_default_unet(arch, &m->unet_cfg);
    sd_default_vae(arch, &m->vae_cfg);
    m->has_unet_cfg = m->has_vae_cfg = true;
    if (arch == RB_SD_ARCH_SD1) {
        m->n_enc = 1;
        sd_default_clip_l(&m->enc[0].cfg);
    } else if (arch == RB_SD_ARCH_SD2) {
        m->n_enc = 1;
        sd_default_clip_h(&m->enc[0].cfg);
        m->enc[0].open_clip = true;
    } else {
        m->n_enc = 2;
        sd_default_clip_l(&m->enc[0].cfg);
        sd_default_clip_g(&m->enc[1].cfg);
        m->enc[1].open_clip = true;
        m->force_zeros = true;
    }
    m->default_w = m->default_h = sd_default_size(arch, m->sched.prediction_type);
    if ((s = sd_model_default_tokenizers(m, opts ? opts->vocab_path : NULL, NULL, false, err)) != RB_OK) goto fail;
    const unsigned comp = sd_opts_components(opts);
    rb_sd_load_opts lo;
    sd_net_opts(opts, &lo);
    fill_ctx f = {.dtype = lo.weight_dtype, .seed = seed};
    sd_weights ws;
    char label[64];
    if (comp & RB_SD_LOAD_TEXT) {
        for (int i = 0; i < m->n_enc; i++) {
            f.map = i == 0 ? &m->ldm->text1 : &m->ldm->text2;
            if ((s = sd_enum_clip(&m->enc[i].cfg, fill_one, &f, err)) != RB_OK) goto fail;
            snprintf(label, sizeof label, "random %s text encoder %d", preset, i + 1);
            if ((s = bind_random(m, f.map, label, &lo, &ws, err)) != RB_OK ||
                (s = sd_clip_text_create(&m->enc[i].cfg, &ws, &m->enc[i].enc, err)) != RB_OK)
                goto fail;
        }
    }
    if (comp & RB_SD_LOAD_UNET) {
        f.map = &m->ldm->unet;
        if ((s = sd_enum_unet(&m->unet_cfg, fill_one, &f, err)) != RB_OK) goto fail;
        snprintf(label, sizeof label, "random %s unet", preset);
        if ((s = bind_random(m, f.map, label, &lo, &ws, err)) != RB_OK ||
            (s = sd_unet_create(&m->unet_cfg, &ws, &m->unet, err)) != RB_OK)
            goto fail;
    }
    if (comp & (RB_SD_LOAD_VAE_DECODER | RB_SD_LOAD_VAE_ENCODER)) {
        m->vae_cfg.decoder_only = !(comp & RB_SD_LOAD_VAE_ENCODER);
        f.map = &m->ldm->vae;
        if ((s = sd_enum_vae(&m->vae_cfg, fill_one, &f, err)) != RB_OK) goto fail;
        snprintf(label, sizeof label, "random %s vae", preset);
        if ((s = bind_random(m, f.map, label, &lo, &ws, err)) != RB_OK ||
            (s = sd_vae_create(&m->vae_cfg, &ws, &m->vae, err)) != RB_OK)
            goto fail;
    }
    m->components = comp;
    if ((s = sd_model_finish(m, opts, err)) != RB_OK) goto fail;
    *out = m;
    return RB_OK;
fail:
    rb_sd_model_free(m);
    return s;
}

rb_status rb_sd_model_create_random_dir(const char *dir, rb_backend *be, const rb_sd_model_opts *opts, uint64_t seed,
                                        rb_sd_model **out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "sd random model: out is NULL");
    *out = NULL;
    if (!dir || !be) return rb_error_set(err, RB_E_INVALID, "sd random model: NULL argument");
    char p[1024];
    if (!sd_name(p, sizeof p, "%s/model_index.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long: %s", dir);
    if (!sd_folder_is_sd3(p))
        return rb_error_set(err, RB_E_UNSUPPORTED, "%s: random weights from a folder's configs need a "
                            "StableDiffusion3Pipeline folder", dir);
    sd3_random_cfg c;
    static const char *const clip[2] = {"text_encoder", "text_encoder_2"};
    for (int i = 0; i < 2; i++) {
        if (!sd_name(p, sizeof p, "%s/%s/config.json", dir, clip[i])) return rb_error_set(err, RB_E_INVALID, "path too long");
        SDP_TRY(rb_clip_text_config_load(p, &c.clip[i], err));
    }
    if (!sd_name(p, sizeof p, "%s/text_encoder_3/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long");
    SDP_TRY(rb_t5_config_load(p, &c.t5, err));
    if (!sd_name(p, sizeof p, "%s/transformer/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long");
    SDP_TRY(rb_mmdit_config_load(p, &c.mmdit, err));
    if (!sd_name(p, sizeof p, "%s/vae/config.json", dir)) return rb_error_set(err, RB_E_INVALID, "path too long");
    SDP_TRY(rb_vae_config_load(p, &c.vae, err));
    return sd_random_sd3(&c, dir, be, opts, dir, seed, out, err);
}
