/* `rbee bench-sd --random sd15|sd21|sdxl`: Stable Diffusion speed without a
 * download. The model is built with random weights at the published shapes
 * (rb_sd_model_create_random: SD 1.5, SD 2.1 768-v, SDXL base), then timed:
 * one UNet evaluation at batch 2 (classifier-free guidance) at the model's
 * default size (latents 64x64 for SD 1.5, 96x96 SD 2.1, 128x128 SDXL; warm-up
 * then --reps timed calls, median and minimum, and the process CPU time per
 * call, which tells a shared machine's contention apart), and a whole txt2img image
 * (prompt encoding, --steps Euler steps with guidance 7.5, VAE decode),
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
    fprintf(f, "usage: rbee bench-sd --random sd15|sd21|sdxl [options]\n\n"
               "  --backend SPEC  --threads N  --dtype f32|f16|bf16 (weights, default f16)\n"
               "  --act-dtype f32|f16|bf16  activations (default f32)\n"
               "  -W, --width N  -H, --height N   image size (default: the model's, 512 / 768 / 1024)\n"
               "  --steps N                 steps of the full image (default 20; 0 = UNet only)\n"
               "  --reps N                  timed UNet calls after one warm-up (default 3)\n"
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

/* Timed UNet evaluations at batch 2 on random inputs. */
static rb_status bench_unet(rb_sd_model *m, int lw, int lh, int reps, mem_probe *mp, double *median, double *best,
                            double *cpu, rb_error *err) {
    rb_backend *be = rb_sd_model_backend(m);
    rb_unet *u = rb_sd_model_unet(m);
    const rb_unet_config *c = rb_unet_get_config(u);
    rb_tensor x = {0}, ctx = {0}, emb = {0}, out = {0};
    const int64_t xne[4] = {lw, lh, c->in_channels, 2}, cne[3] = {c->cross_attention_dim, 77, 2},
                  one[4] = {lw, lh, c->out_channels, 2};
    const int64_t pooled = c->add_text_time ? c->projection_class_embeddings_input_dim - 6 * c->addition_time_embed_dim : 0;
    const int64_t ene[2] = {pooled, 2};
    float ts[2] = {500.0f, 500.0f}, ids[12];
    for (int r = 0; r < 2; r++) {
        const float v[6] = {(float)(lh * 8), (float)(lw * 8), 0, 0, (float)(lh * 8), (float)(lw * 8)};
        memcpy(ids + 6 * r, v, sizeof v);
    }
    rb_status s;
    if ((s = rb_tensor_alloc(be, RB_F32, 4, xne, &x)) != RB_OK || (s = rb_tensor_alloc(be, RB_F32, 3, cne, &ctx)) != RB_OK ||
        (s = rb_tensor_alloc(be, RB_F32, 4, one, &out)) != RB_OK ||
        (pooled && (s = rb_tensor_alloc(be, RB_F32, 2, ene, &emb)) != RB_OK)) {
        rb_error_set(err, s, "cannot allocate the UNet benchmark tensors");
        goto done;
    }
    if ((s = rb_fill(be, &x, 0.5f)) != RB_OK || (s = rb_fill(be, &ctx, 0.1f)) != RB_OK ||
        (pooled && (s = rb_fill(be, &emb, 0.1f)) != RB_OK)) {
        rb_error_set(err, s, "cannot fill the UNet benchmark inputs");
        goto done;
    }
    rb_unet_inputs in = {.sample = &x, .timesteps = ts, .context = &ctx, .text_embeds = pooled ? &emb : NULL,
                         .time_ids = pooled ? ids : NULL, .n_time_ids = pooled ? 6 : 0};
    double t[64], cpu_sum = 0.0;
    for (int i = 0; i <= reps; i++) {
        const double t0 = now_ms(), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        if ((s = rb_unet_forward(u, &in, &out, err)) != RB_OK) goto done;
        if ((s = rb_backend_sync(be)) != RB_OK) {
            rb_error_set(err, s, "backend sync failed");
            goto done;
        }
        if (i > 0) {
            t[i - 1] = now_ms() - t0;
            cpu_sum += clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
        probe(mp);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    *median = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    *best = t[0];
    *cpu = cpu_sum / reps;
done:
    rb_tensor_free(&x);
    rb_tensor_free(&ctx);
    rb_tensor_free(&emb);
    rb_tensor_free(&out);
    return s;
}

int rb_cmd_bench_sd(int argc, char **argv) {
    const char *preset = NULL, *backend = "cpu";
    int64_t threads = 0, width = 0, height = 0, steps = 20, reps = 3;
    bool json = false;
    rb_sd_model_opts mo;
    rb_sd_model_opts_init(&mo);
    mo.weight_dtype = RB_F16;
    enum { OPT_RANDOM = 1000, OPT_BACKEND, OPT_THREADS, OPT_DTYPE, OPT_STEPS, OPT_REPS, OPT_JSON, OPT_ACT };
    static const struct option opts[] = {
        {"random", required_argument, 0, OPT_RANDOM}, {"backend", required_argument, 0, OPT_BACKEND},
        {"threads", required_argument, 0, OPT_THREADS}, {"dtype", required_argument, 0, OPT_DTYPE},
        {"width", required_argument, 0, 'W'},         {"height", required_argument, 0, 'H'},
        {"steps", required_argument, 0, OPT_STEPS},   {"reps", required_argument, 0, OPT_REPS},
        {"json", no_argument, 0, OPT_JSON},           {"act-dtype", required_argument, 0, OPT_ACT},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "W:H:h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_RANDOM: preset = optarg; break;
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
        case OPT_JSON: json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!preset || optind != argc) {
        fprintf(stderr, "error: --random sd15|sd21|sdxl is required\n\n");
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
    if (rb_sd_model_create_random(preset, be, &mo, 1, &m, &err) != RB_OK) goto done;
    const double load_ms = now_ms() - t0;
    probe(&mp);
    rb_sd_model_info mi;
    rb_sd_model_get_info(m, &mi);
    const int W = width ? (int)width : mi.default_width, H = height ? (int)height : mi.default_height;
    if (!json)
        fprintf(stderr, "random %s (%s weights, %.2f GiB) on %s, %dx%d\n", preset, rb_dtype_name(mo.weight_dtype),
                (double)mi.weight_bytes / (1 << 30), rb_backend_name(be), W, H);
    double unet_med = 0, unet_min = 0, unet_cpu = 0;
    if (bench_unet(m, W / 8, H / 8, (int)reps, &mp, &unet_med, &unet_min, &unet_cpu, &err) != RB_OK) goto done;
    if (!json)
        fprintf(stderr, "UNet, batch 2, %dx%d latents: median %.1f ms, min %.1f ms (%d reps; %.1f ms of CPU time each)\n",
                W / 8, H / 8, unet_med, unet_min, (int)reps, unet_cpu);
    double total_ms = 0;
    if (steps > 0) {
        rb_sd_params p;
        rb_sd_params_init(&p);
        p.prompt = "a photograph of an astronaut riding a horse";
        p.negative_prompt = "blurry";
        p.width = W;
        p.height = H;
        p.steps = (int)steps;
        p.sampler = "euler";
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
               "\"weight_bytes\":%zu,\"load_ms\":%.1f,\"unet_batch2_ms_median\":%.3f,\"unet_batch2_ms_min\":%.3f,"
               "\"unet_cpu_ms\":%.1f,\"unet_reps\":%d,\"steps\":%d,\"image_ms\":%.1f,\"text_ms\":%.1f,\"denoise_ms\":%.1f,"
               "\"decode_ms\":%.1f,\"peak_mem_used_bytes\":%zu,\"peak_mem_over_start_gib\":%.3f}\n",
               preset, rb_backend_name(be), rb_dtype_name(mo.weight_dtype), rb_dtype_name(mo.act_dtype), W, H, mi.weight_bytes, load_ms, unet_med,
               unet_min, unet_cpu, (int)reps, (int)steps, total_ms, out.text_ms, out.denoise_ms, out.decode_ms, mp.peak, peak_gib);
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
