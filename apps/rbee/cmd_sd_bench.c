/* `rbee bench-sd --random sd15|sd21|sdxl|sd3m|sd35m`: Stable Diffusion speed
 * without a download. The model is built with random weights at the
 * published shapes (rb_sd_model_create_random: SD 1.5, SD 2.1 768-v, SDXL
 * base, SD3-medium, SD3.5-medium), then timed: one denoiser evaluation at
 * batch 2 (classifier-free guidance) at the model's default size (latents
 * 64x64 for SD 1.5, 96x96 SD 2.1, 128x128 SDXL and SD3; the UNet against 77
 * context tokens, SD3's MMDiT against 77 CLIP + --t5-tokens T5 tokens), the
 * VAE decode of one latent, for SD3 the T5 encoder on one prompt of
 * --t5-tokens tokens (each: warm-up then --reps timed calls, median and
 * minimum, and the process CPU time per call, which tells a shared
 * machine's contention apart), and a whole txt2img image (prompt encoding,
 * --steps steps: Euler with guidance 7.5, SD3 flow_euler with guidance 7
 * and 28 steps by default; VAE decode). --random-from DIR builds the random
 * model at the configs of a diffusers SD3 folder instead (other SD3 sizes;
 * the tests run it at a tiny size),
 * with the device memory in use (rb_backend_device_info: total - free,
 * sampled after loading and after every model evaluation; on the CPU that
 * is the whole machine's). Sizes, steps and repetitions are flags so a CPU
 * run can be short (--width 256 --height 256 --steps 2). --json prints one
 * JSON object on stdout. */
#include "cli_common.h"
#include "commands.h"

#include "rbee/sd_pipeline.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f, "usage: rbee bench-sd --random sd15|sd21|sdxl|sd3m|sd35m [options]\n"
               "       rbee bench-sd --random-from SD3_FOLDER [options]  (random weights at the folder's configs)\n\n"
               "  --backend SPEC  --threads N  --dtype f32|f16|bf16 (weights, default f16)\n"
               "  --act-dtype f32|f16|bf16  activations (default f32)\n"
               "  -W, --width N  -H, --height N   image size (default: the model's, 512 / 768 / 1024)\n"
               "  --steps N                 steps of the full image (default 20, SD3 28; 0 = no image)\n"
               "  --reps N                  timed calls of each network after one warm-up (default 3)\n"
               "  --t5-tokens N             SD3: T5 tokens (max_sequence_length, default 256)\n"
               "  --no-t5                   SD3: leave the T5 encoder out (zeros for its tokens)\n"
               "  --json                    one JSON object on stdout\n");
}

static double clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

typedef struct mem_probe {
    rb_backend *be;
    size_t peak;
} mem_probe;

static void probe(mem_probe *p) {
    rb_device_info di;
    if (rb_backend_device_info(p->be, &di) != RB_OK || di.mem_total < di.mem_free) return;
    const size_t used = di.mem_total - di.mem_free;
    if (used > p->peak) p->peak = used;
}

static void on_progress(void *user, int done, int total) {
    (void)done;
    (void)total;
    probe(user);
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One timed call: runs the network once (the backend synchronised after). */
typedef rb_status (*bench_fn)(void *ctx, rb_error *err);

typedef struct timing {
    double median, best, cpu; /* ms: wall median, wall minimum, process CPU time per call */
} timing;

/* One warm-up call, then reps timed calls. */
static rb_status time_calls(rb_backend *be, bench_fn fn, void *ctx, int reps, mem_probe *mp, timing *t,
                            rb_error *err) {
    double ms[64], cpu_sum = 0.0;
    for (int i = 0; i <= reps; i++) {
        const double t0 = now_ms(), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        rb_status s = fn(ctx, err);
        if (s != RB_OK) return s;
        if ((s = rb_backend_sync(be)) != RB_OK) return rb_error_set(err, s, "backend sync failed");
        if (i > 0) {
            ms[i - 1] = now_ms() - t0;
            cpu_sum += clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
        probe(mp);
    }
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_d);
    t->median = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    t->best = ms[0];
    t->cpu = cpu_sum / reps;
    return RB_OK;
}

/* The inputs of one denoiser call at batch 2 (the CFG pair), filled with constants. */
typedef struct den_call {
    rb_sd_model *m;
    rb_tensor x, ctx, emb, out;
    float ts[2], ids[12];
    int64_t pooled;
} den_call;

static rb_status den_run(void *vctx, rb_error *err) {
    den_call *d = vctx;
    rb_mmdit *dit = rb_sd_model_mmdit(d->m);
    if (dit) {
        rb_mmdit_inputs in = {.sample = &d->x, .context = &d->ctx, .pooled = &d->emb, .timesteps = d->ts};
        return rb_mmdit_forward(dit, &in, &d->out, err);
    }
    rb_unet_inputs in = {.sample = &d->x, .timesteps = d->ts, .context = &d->ctx,
                         .text_embeds = d->pooled ? &d->emb : NULL, .time_ids = d->pooled ? d->ids : NULL,
                         .n_time_ids = d->pooled ? 6 : 0};
    return rb_unet_forward(rb_sd_model_unet(d->m), &in, &d->out, err);
}

/* Timed denoiser evaluations at batch 2 on constant inputs: the UNet against
 * 77 context tokens, SD3's MMDiT against 77 CLIP + t5_tokens T5 tokens. */
static rb_status bench_denoiser(rb_sd_model *m, int lw, int lh, int t5_tokens, int reps, mem_probe *mp, timing *t,
                                rb_error *err) {
    rb_backend *be = rb_sd_model_backend(m);
    den_call d = {.m = m, .ts = {500.0f, 500.0f}};
    int64_t cin, cout, cdim, tokens = 77;
    const rb_mmdit *dit = rb_sd_model_mmdit(m);
    if (dit) {
        const rb_mmdit_config *c = rb_mmdit_get_config(dit);
        cin = c->in_channels;
        cout = c->out_channels;
        cdim = c->joint_attention_dim;
        d.pooled = c->pooled_projection_dim;
        tokens += t5_tokens;
    } else {
        const rb_unet_config *c = rb_unet_get_config(rb_sd_model_unet(m));
        cin = c->in_channels;
        cout = c->out_channels;
        cdim = c->cross_attention_dim;
        d.pooled = c->add_text_time ? c->projection_class_embeddings_input_dim - 6 * c->addition_time_embed_dim : 0;
        for (int r = 0; r < 2; r++) {
            const float v[6] = {(float)(lh * 8), (float)(lw * 8), 0, 0, (float)(lh * 8), (float)(lw * 8)};
            memcpy(d.ids + 6 * r, v, sizeof v);
        }
    }
    const int64_t xne[4] = {lw, lh, cin, 2}, cne[3] = {cdim, tokens, 2}, one[4] = {lw, lh, cout, 2},
                  ene[2] = {d.pooled, 2};
    rb_status s;
    if ((s = rb_tensor_alloc(be, RB_F32, 4, xne, &d.x)) != RB_OK || (s = rb_tensor_alloc(be, RB_F32, 3, cne, &d.ctx)) != RB_OK ||
        (s = rb_tensor_alloc(be, RB_F32, 4, one, &d.out)) != RB_OK ||
        (d.pooled && (s = rb_tensor_alloc(be, RB_F32, 2, ene, &d.emb)) != RB_OK)) {
        rb_error_set(err, s, "cannot allocate the denoiser benchmark tensors");
        goto done;
    }
    if ((s = rb_fill(be, &d.x, 0.5f)) != RB_OK || (s = rb_fill(be, &d.ctx, 0.1f)) != RB_OK ||
        (d.pooled && (s = rb_fill(be, &d.emb, 0.1f)) != RB_OK)) {
        rb_error_set(err, s, "cannot fill the denoiser benchmark inputs");
        goto done;
    }
    s = time_calls(be, den_run, &d, reps, mp, t, err);
done:
    rb_tensor_free(&d.x);
    rb_tensor_free(&d.ctx);
    rb_tensor_free(&d.emb);
    rb_tensor_free(&d.out);
    return s;
}

typedef struct t5_call {
    rb_t5 *t5;
    int32_t *ids;
    int64_t n;
    rb_tensor out;
} t5_call;

static rb_status t5_run(void *vctx, rb_error *err) {
    t5_call *c = vctx;
    return rb_t5_encode(c->t5, c->ids, c->n, 1, &c->out, err);
}

/* SD3's T5 encoder on one prompt of n tokens (ids spread over the vocabulary). */
static rb_status bench_t5(rb_sd_model *m, int n, int reps, mem_probe *mp, timing *t, rb_error *err) {
    t5_call c = {.t5 = rb_sd_model_t5(m), .n = n};
    const rb_t5_config *cfg = rb_t5_get_config(c.t5);
    c.ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!c.ids) return rb_error_set(err, RB_E_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) c.ids[i] = (int32_t)(((int64_t)i * 7919 + 3) % cfg->vocab_size);
    const int64_t ne[3] = {cfg->d_model, n, 1};
    rb_status s = rb_tensor_alloc(rb_sd_model_backend(m), RB_F32, 3, ne, &c.out);
    if (s != RB_OK) rb_error_set(err, s, "cannot allocate the T5 benchmark output");
    else s = time_calls(rb_sd_model_backend(m), t5_run, &c, reps, mp, t, err);
    rb_tensor_free(&c.out);
    free(c.ids);
    return s;
}

typedef struct vae_call {
    rb_vae *vae;
    rb_tensor z, img;
} vae_call;

static rb_status vae_run(void *vctx, rb_error *err) {
    vae_call *c = vctx;
    return rb_vae_decode(c->vae, &c->z, &c->img, err);
}

/* The VAE decoder on one lw x lh latent (constant values). */
static rb_status bench_vae(rb_sd_model *m, int lw, int lh, int reps, mem_probe *mp, timing *t, rb_error *err) {
    rb_backend *be = rb_sd_model_backend(m);
    vae_call c = {.vae = rb_sd_model_vae(m)};
    const rb_vae_config *cfg = rb_vae_get_config(c.vae);
    const int sc = rb_vae_scale(c.vae);
    const int64_t zne[4] = {lw, lh, cfg->latent_channels, 1}, ine[4] = {lw * sc, lh * sc, cfg->out_channels, 1};
    rb_status s;
    if ((s = rb_tensor_alloc(be, RB_F32, 4, zne, &c.z)) != RB_OK || (s = rb_tensor_alloc(be, RB_F32, 4, ine, &c.img)) != RB_OK ||
        (s = rb_fill(be, &c.z, 0.1f)) != RB_OK)
        rb_error_set(err, s, "cannot set up the VAE benchmark tensors");
    else
        s = time_calls(be, vae_run, &c, reps, mp, t, err);
    rb_tensor_free(&c.z);
    rb_tensor_free(&c.img);
    return s;
}

int rb_cmd_bench_sd(int argc, char **argv) {
    const char *preset = NULL, *from = NULL, *backend = "cpu";
    int64_t threads = 0, width = 0, height = 0, steps = -1, reps = 3, t5_tokens = 256;
    bool json = false;
    rb_sd_model_opts mo;
    rb_sd_model_opts_init(&mo);
    mo.weight_dtype = RB_F16;
    enum { OPT_RANDOM = 1000, OPT_BACKEND, OPT_THREADS, OPT_DTYPE, OPT_STEPS, OPT_REPS, OPT_JSON, OPT_ACT, OPT_T5, OPT_NO_T5, OPT_FROM };
    static const struct option opts[] = {
        {"random", required_argument, 0, OPT_RANDOM}, {"backend", required_argument, 0, OPT_BACKEND},
        {"threads", required_argument, 0, OPT_THREADS}, {"dtype", required_argument, 0, OPT_DTYPE},
        {"width", required_argument, 0, 'W'},         {"height", required_argument, 0, 'H'},
        {"steps", required_argument, 0, OPT_STEPS},   {"reps", required_argument, 0, OPT_REPS},
        {"json", no_argument, 0, OPT_JSON},           {"act-dtype", required_argument, 0, OPT_ACT},
        {"random-from", required_argument, 0, OPT_FROM}, {"t5-tokens", required_argument, 0, OPT_T5},  {"no-t5", no_argument, 0, OPT_NO_T5},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "W:H:h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_RANDOM: preset = optarg; break;
        case OPT_FROM: from = optarg; break;
        case OPT_BACKEND: backend = optarg; break;
        case OPT_THREADS: if (!cli_parse_int("--threads", optarg, 0, 1024, &threads)) return 2; break;
        case OPT_DTYPE:
            if (!rb_dtype_from_name(optarg, &mo.weight_dtype) ||
                (mo.weight_dtype != RB_F32 && mo.weight_dtype != RB_F16 && mo.weight_dtype != RB_BF16)) {
                fprintf(stderr, "error: --dtype must be f32, f16 or bf16 (got '%s')\n", optarg);
                return 2;
            }
            break;
        case OPT_ACT:
            if (!rb_dtype_from_name(optarg, &mo.act_dtype) ||
                (mo.act_dtype != RB_F32 && mo.act_dtype != RB_F16 && mo.act_dtype != RB_BF16)) {
                fprintf(stderr, "error: --act-dtype must be f32, f16 or bf16 (got '%s')\n", optarg);
                return 2;
            }
            break;
        case 'W': if (!cli_parse_int("--width", optarg, 64, RB_SD_MAX_SIDE, &width)) return 2; break;
        case 'H': if (!cli_parse_int("--height", optarg, 64, RB_SD_MAX_SIDE, &height)) return 2; break;
        case OPT_STEPS: if (!cli_parse_int("--steps", optarg, 0, RB_SD_MAX_STEPS, &steps)) return 2; break;
        case OPT_REPS: if (!cli_parse_int("--reps", optarg, 1, 64, &reps)) return 2; break;
        case OPT_T5: if (!cli_parse_int("--t5-tokens", optarg, 1, 512, &t5_tokens)) return 2; break;
        case OPT_NO_T5: mo.no_t5 = true; break;
        case OPT_JSON: json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!preset == !from || optind != argc) {
        fprintf(stderr, "error: one of --random sd15|sd21|sdxl|sd3m|sd35m or --random-from DIR is required\n\n");
        usage(stderr);
        return 2;
    }
    if (width % 64 || height % 64) {
        fprintf(stderr, "error: --width and --height must be multiples of 64\n");
        return 2;
    }
    rb_error err;
    rb_error_clear(&err);
    rb_backend *be = NULL;
    rb_sd_model *m = NULL;
    rb_sd_output out = {0};
    int rc = 1;
    rb_backend_config bc = {.n_threads = (int)threads};
    if (rb_backend_create(backend, &bc, &be, &err) != RB_OK) goto done;
    mem_probe mp = {.be = be};
    probe(&mp);
    const size_t base = mp.peak;
    mp.peak = 0;
    double t0 = now_ms();
    if ((from ? rb_sd_model_create_random_dir(from, be, &mo, 1, &m, &err)
              : rb_sd_model_create_random(preset, be, &mo, 1, &m, &err)) != RB_OK)
        goto done;
    if (from) preset = from;
    const double load_ms = now_ms() - t0;
    probe(&mp);
    rb_sd_model_info mi;
    rb_sd_model_get_info(m, &mi);
    const int W = width ? (int)width : mi.default_width, H = height ? (int)height : mi.default_height;
    if (!json)
        fprintf(stderr, "random %s (%s weights, %.2f GiB, built in %.1f s) on %s, %dx%d\n", preset,
                rb_dtype_name(mo.weight_dtype), (double)mi.weight_bytes / (1 << 30), load_ms / 1e3, rb_backend_name(be), W,
                H);
    const bool sd3 = rb_sd_model_mmdit(m) != NULL;
    const char *den = sd3 ? "MMDiT" : "UNet";
    if (steps < 0) steps = sd3 ? 28 : 20;
    timing tu = {0}, tt = {0}, tv = {0};
    if (bench_denoiser(m, W / 8, H / 8, (int)t5_tokens, (int)reps, &mp, &tu, &err) != RB_OK) goto done;
    if (!json)
        fprintf(stderr, "%s, batch 2, %dx%d latents%s: median %.1f ms, min %.1f ms (%d reps; %.1f ms of CPU time each)\n",
                den, W / 8, H / 8, sd3 ? ", 77 + T5 tokens" : "", tu.median, tu.best, (int)reps, tu.cpu);
    if (rb_sd_model_t5(m)) {
        if (bench_t5(m, (int)t5_tokens, (int)reps, &mp, &tt, &err) != RB_OK) goto done;
        if (!json)
            fprintf(stderr, "T5 encoder, %d tokens: median %.1f ms, min %.1f ms\n", (int)t5_tokens, tt.median, tt.best);
    }
    if (bench_vae(m, W / 8, H / 8, (int)reps, &mp, &tv, &err) != RB_OK) goto done;
    if (!json) fprintf(stderr, "VAE decode, %dx%d: median %.1f ms, min %.1f ms\n", W, H, tv.median, tv.best);
    double total_ms = 0;
    if (steps > 0) {
        rb_sd_params p;
        rb_sd_params_init(&p);
        p.prompt = "a photograph of an astronaut riding a horse";
        p.negative_prompt = "blurry";
        p.width = W;
        p.height = H;
        p.steps = (int)steps;
        p.sampler = sd3 ? "flow_euler" : "euler";
        if (sd3) {
            p.guidance_scale = 7.0f;
            p.max_sequence_length = (int)t5_tokens;
        }
        p.seed = 1;
        rb_sd_callbacks cb = {.progress = on_progress, .user = &mp};
        t0 = now_ms();
        if (rb_sd_generate(m, &p, &cb, &out, &err) != RB_OK) goto done;
        total_ms = now_ms() - t0;
        probe(&mp);
        if (!json)
            fprintf(stderr, "txt2img %dx%d, %d steps: %.1f ms (text %.1f, denoise %.1f, decode %.1f)\n", W, H, (int)steps,
                    total_ms, out.text_ms, out.denoise_ms, out.decode_ms);
    }
    const double peak_gib = mp.peak > base ? (double)(mp.peak - base) / (1 << 30) : 0.0;
    if (json) {
        printf("{\"model\":\"%s\",\"backend\":\"%s\",\"dtype\":\"%s\",\"act_dtype\":\"%s\",\"width\":%d,\"height\":%d,"
               "\"weight_bytes\":%zu,\"load_ms\":%.1f,\"denoiser\":\"%s\",\"unet_batch2_ms_median\":%.3f,"
               "\"unet_batch2_ms_min\":%.3f,\"unet_cpu_ms\":%.1f,\"unet_reps\":%d,\"t5_tokens\":%d,\"t5_ms_median\":%.3f,"
               "\"t5_ms_min\":%.3f,\"vae_decode_ms_median\":%.3f,\"vae_decode_ms_min\":%.3f,\"steps\":%d,\"image_ms\":%.1f,\"text_ms\":%.1f,\"denoise_ms\":%.1f,"
               "\"decode_ms\":%.1f,\"peak_mem_used_bytes\":%zu,\"peak_mem_over_start_gib\":%.3f}\n",
               preset, rb_backend_name(be), rb_dtype_name(mo.weight_dtype), rb_dtype_name(mo.act_dtype), W, H, mi.weight_bytes, load_ms, sd3 ? "mmdit" : "unet",
               tu.median, tu.best, tu.cpu, (int)reps, rb_sd_model_t5(m) ? (int)t5_tokens : 0, tt.median, tt.best, tv.median,
               tv.best, (int)steps, total_ms, out.text_ms, out.denoise_ms, out.decode_ms, mp.peak, peak_gib);
    } else {
        fprintf(stderr, "device memory in use: peak %.2f GiB (%.2f GiB over the start)\n", (double)mp.peak / (1 << 30),
                peak_gib);
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", err.msg);
    rb_sd_output_free(&out);
    rb_sd_model_free(m);
    rb_backend_destroy(be);
    return rc;
}
