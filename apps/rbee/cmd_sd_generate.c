/* `rbee txt2img`, `rbee img2img`, `rbee inpaint`: one Stable Diffusion
 * generation (rb_sd_generate) from the command line, written as PNG files
 * carrying AUTOMATIC1111's "parameters" infotext, with a progress bar on
 * stderr. Input images (PNG or JPEG) are used at their own size: the output
 * size defaults to it and must equal it (diffusers would resize with
 * Lanczos; here a mismatch is refused with a message, so no resampling
 * ever changes the input silently), a multiple of 8. */
#include "cli_common.h"
#include "commands.h"

#include "rbee/image.h"
#include "rbee/sd_pipeline.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum sd_mode { MODE_TXT2IMG, MODE_IMG2IMG, MODE_INPAINT } sd_mode;

static const char *const k_mode_name[] = {"txt2img", "img2img", "inpaint"};

static void usage(FILE *f, sd_mode mode) {
    fprintf(f, "usage: rbee %s [-m MODEL] -p PROMPT%s [options]\n\n", k_mode_name[mode],
            mode == MODE_TXT2IMG ? "" : mode == MODE_IMG2IMG ? " --init-image IMG" : " --init-image IMG --mask IMG");
    fprintf(f,
            "  -m, --model PATH          diffusers folder, .safetensors single file or .gguf file (default: the\n"
            "                            bundled model in models/default-sd, or $RBEE_DEFAULT_SD_MODEL)\n"
            "  -p, --prompt TEXT         the prompt\n"
            "  -n, --negative TEXT       negative prompt (default none; SDXL then uses zero embeddings)\n"
            "  --prompt-2 TEXT  --negative-2 TEXT   SDXL's second text encoder (default: the same)\n"
            "  -W, --width N  -H, --height N        output size, multiples of 8 (default: the model's, or the\n"
            "                            init image's; input images are not resized and must have this size)\n"
            "  --steps N                 denoising steps before strength (default 20)\n"
            "  --cfg S                   guidance scale (default 7.5; <= 1 disables classifier-free guidance)\n"
            "  --sampler NAME            euler, euler_a, heun, dpmpp_2m, dpmpp_sde, ddim, lcm, flow_euler (SD3),\n"
            "                            optionally with a schedule suffix (dpmpp_2m_karras); default: the\n"
            "                            model's scheduler\n"
            "  --scheduler NAME          schedule: default, karras, exponential, sgm_uniform, simple\n"
            "  --eta E                   ddim / ancestral noise scale (default: the sampler's)\n"
            "  --seed N                  generator seed, -1 = random (printed; default -1)\n"
            "  --rng cpu|cuda            noise as torch's CPU generator (diffusers, ComfyUI) or CUDA one\n"
            "                            (AUTOMATIC1111's GPU seeds); default cpu\n"
            "  --clip-skip K             skip the last K text encoder layers (diffusers' clip_skip; A1111's\n"
            "                            \"Clip skip\" is K + 1)\n"
            "  --prompt-mode MODE        diffusers (truncate at 77 tokens, default) or a1111 (75-token chunks,\n"
            "                            BREAK, (emphasis:1.2) weights)\n"
            "  --batch N                 images per run (one noise draw for all, as diffusers)\n"
            "  -o, --output FILE.png     output (default out.png; a batch writes FILE-0.png, FILE-1.png, ...)\n"
            "  --backend SPEC  --threads N  --dtype f32|f16|bf16 (weights)  --act-dtype f32|f16|bf16\n"
            "  --prediction auto|epsilon|v   prediction type (single-file SD 2.x: auto = v, 768x768)\n"
            "  --config-dir DIR          single files: configs from this diffusers folder\n"
            "  --vocab FILE              single files: the CLIP vocabulary (bpe_simple_vocab_16e6.txt.gz)\n"
            "  --vae-tiling auto|on|off  tiled VAE decode (auto: images over 4x the model's default size)\n"
            "  --no-t5                   SD3: leave the T5 text encoder out (its part of the context is zeros)\n"
            "  --max-sequence-length N   SD3: T5 tokens of the prompt (default 256)\n"
            "  -q, --quiet               no progress bar\n");
    if (mode != MODE_TXT2IMG)
        fprintf(f, "  --init-image FILE         PNG or JPEG\n"
                   "  --strength S              (0, 1], default %s\n",
                mode == MODE_IMG2IMG ? "0.8" : "1.0");
    if (mode == MODE_INPAINT) fprintf(f, "  --mask FILE               PNG or JPEG, white = repaint\n");
}

static bool read_image(const char *path, int channels, rb_image *out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open %s\n", path);
        return false;
    }
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            if (cap > ((size_t)256 << 20)) {
                fprintf(stderr, "error: %s is larger than 256 MiB\n", path);
                fclose(f);
                free(buf);
                return false;
            }
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                fprintf(stderr, "error: out of memory reading %s\n", path);
                fclose(f);
                free(buf);
                return false;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    rb_image_decode_opts o = {.channels = channels};
    rb_error err;
    rb_error_clear(&err);
    rb_status s = rb_image_decode(buf, n, &o, out, &err);
    free(buf);
    if (s != RB_OK) {
        fprintf(stderr, "error: %s: %s\n", path, err.msg);
        return false;
    }
    return true;
}

static bool write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        if (f) fclose(f);
        fprintf(stderr, "error: cannot write %s\n", path);
        return false;
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "error: cannot write %s\n", path);
        return false;
    }
    return true;
}

static void progress(void *user, int done, int total) {
    if (!user) return;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    const int fill = total > 0 ? done * WIDTH / total : WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\r[%s] %d/%d", bar, done, total);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

/* A seed for --seed -1: 32 bits from the OS (as A1111 picks seeds). */
static uint64_t random_seed(void) {
    uint32_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&v, sizeof v, 1, f) != 1) v = (uint32_t)time(NULL) ^ (uint32_t)getpid() * 2654435761u;
    if (f) fclose(f);
    return v;
}

/* out.png -> out-<i>.png for batches. */
static void output_name(const char *base, int i, int count, char *out, size_t cap) {
    if (count == 1) {
        snprintf(out, cap, "%s", base);
        return;
    }
    const char *slash = strrchr(base, '/'), *dot = strrchr(base, '.');
    if (!dot || (slash && dot < slash)) dot = base + strlen(base);
    snprintf(out, cap, "%.*s-%d%s", (int)(dot - base), base, i, dot);
}

enum { OPT_STEPS = 1000, OPT_CFG, OPT_SAMPLER, OPT_SCHED, OPT_SEED, OPT_RNG, OPT_CLIP, OPT_STRENGTH, OPT_BATCH,
       OPT_BACKEND, OPT_THREADS, OPT_DTYPE, OPT_INIT, OPT_MASK, OPT_PRED, OPT_CONFIG, OPT_VOCAB, OPT_TILING, OPT_ETA,
       OPT_PMODE, OPT_PROMPT2, OPT_NEG2, OPT_ACT, OPT_NO_T5, OPT_T5_LEN };

static int run(int argc, char **argv, sd_mode mode) {
    const char *model = NULL, *backend = "cpu", *output = "out.png", *init_path = NULL, *mask_path = NULL;
    int64_t threads = 0, iv = 0, seed = -1;
    double fv = 0;
    bool quiet = false;
    rb_sd_params p;
    rb_sd_params_init(&p);
    p.prompt = NULL;
    rb_sd_model_opts mo;
    rb_sd_model_opts_init(&mo);
    rb_error err;
    rb_error_clear(&err);
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"prompt", required_argument, 0, 'p'},
        {"negative", required_argument, 0, 'n'},   {"width", required_argument, 0, 'W'},
        {"height", required_argument, 0, 'H'},     {"output", required_argument, 0, 'o'},
        {"quiet", no_argument, 0, 'q'},            {"steps", required_argument, 0, OPT_STEPS},
        {"cfg", required_argument, 0, OPT_CFG},    {"sampler", required_argument, 0, OPT_SAMPLER},
        {"scheduler", required_argument, 0, OPT_SCHED}, {"seed", required_argument, 0, OPT_SEED},
        {"rng", required_argument, 0, OPT_RNG},    {"clip-skip", required_argument, 0, OPT_CLIP},
        {"strength", required_argument, 0, OPT_STRENGTH}, {"batch", required_argument, 0, OPT_BATCH},
        {"backend", required_argument, 0, OPT_BACKEND}, {"threads", required_argument, 0, OPT_THREADS},
        {"dtype", required_argument, 0, OPT_DTYPE}, {"init-image", required_argument, 0, OPT_INIT},
        {"mask", required_argument, 0, OPT_MASK},  {"prediction", required_argument, 0, OPT_PRED},
        {"config-dir", required_argument, 0, OPT_CONFIG}, {"vocab", required_argument, 0, OPT_VOCAB},
        {"vae-tiling", required_argument, 0, OPT_TILING}, {"eta", required_argument, 0, OPT_ETA},
        {"prompt-mode", required_argument, 0, OPT_PMODE}, {"prompt-2", required_argument, 0, OPT_PROMPT2},
        {"negative-2", required_argument, 0, OPT_NEG2}, {"act-dtype", required_argument, 0, OPT_ACT},
        {"no-t5", no_argument, 0, OPT_NO_T5},     {"max-sequence-length", required_argument, 0, OPT_T5_LEN},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:W:H:o:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': p.prompt = optarg; break;
        case 'n': p.negative_prompt = optarg; break;
        case OPT_PROMPT2: p.prompt_2 = optarg; break;
        case OPT_NEG2: p.negative_prompt_2 = optarg; break;
        case 'W': if (!cli_parse_int("--width", optarg, 8, RB_SD_MAX_SIDE, &iv)) return 2; p.width = (int)iv; break;
        case 'H': if (!cli_parse_int("--height", optarg, 8, RB_SD_MAX_SIDE, &iv)) return 2; p.height = (int)iv; break;
        case 'o': output = optarg; break;
        case 'q': quiet = true; break;
        case OPT_STEPS: if (!cli_parse_int("--steps", optarg, 1, RB_SD_MAX_STEPS, &iv)) return 2; p.steps = (int)iv; break;
        case OPT_CFG:
            if (!cli_parse_float("--cfg", optarg, 0, RB_SD_MAX_GUIDANCE, &fv)) return 2;
            p.guidance_scale = (float)fv;
            break;
        case OPT_SAMPLER: p.sampler = optarg; break;
        case OPT_SCHED: p.schedule = optarg; break;
        case OPT_SEED: if (!cli_parse_int("--seed", optarg, -1, INT64_MAX, &seed)) return 2; break;
        case OPT_RNG:
            if (rb_torch_rng_kind_parse(optarg, &p.rng, &err) != RB_OK) {
                fprintf(stderr, "error: --rng: %s\n", err.msg);
                return 2;
            }
            break;
        case OPT_CLIP: if (!cli_parse_int("--clip-skip", optarg, 0, 64, &iv)) return 2; p.clip_skip = (int)iv; break;
        case OPT_NO_T5: mo.no_t5 = true; break;
        case OPT_T5_LEN:
            if (!cli_parse_int("--max-sequence-length", optarg, 1, 512, &iv)) return 2;
            p.max_sequence_length = (int)iv;
            break;
        case OPT_STRENGTH: if (!cli_parse_float("--strength", optarg, 1e-6, 1, &p.strength)) return 2; break;
        case OPT_BATCH: if (!cli_parse_int("--batch", optarg, 1, RB_SD_MAX_BATCH, &iv)) return 2; p.batch = (int)iv; break;
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
        case OPT_INIT: init_path = optarg; break;
        case OPT_MASK: mask_path = optarg; break;
        case OPT_PRED:
            if (rb_sd_predict_parse(optarg, &mo.prediction, &err) != RB_OK) {
                fprintf(stderr, "error: --prediction: %s\n", err.msg);
                return 2;
            }
            break;
        case OPT_CONFIG: mo.config_dir = optarg; break;
        case OPT_VOCAB: mo.vocab_path = optarg; break;
        case OPT_TILING:
            if (!strcmp(optarg, "auto")) p.vae_tiling = RB_SD_TILING_AUTO;
            else if (!strcmp(optarg, "on")) p.vae_tiling = RB_SD_TILING_ON;
            else if (!strcmp(optarg, "off")) p.vae_tiling = RB_SD_TILING_OFF;
            else {
                fprintf(stderr, "error: --vae-tiling must be auto, on or off (got '%s')\n", optarg);
                return 2;
            }
            break;
        case OPT_ETA: if (!cli_parse_float("--eta", optarg, 0, 10, &p.eta)) return 2; break;
        case OPT_PMODE:
            if (!strcmp(optarg, "diffusers")) p.prompt_mode = RB_SD_PROMPT_TRUNCATE;
            else if (!strcmp(optarg, "a1111")) {
                p.prompt_mode = RB_SD_PROMPT_A1111;
                p.emphasis = true;
            } else {
                fprintf(stderr, "error: --prompt-mode must be diffusers or a1111 (got '%s')\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout, mode); return 0;
        default: usage(stderr, mode); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "error: unexpected argument '%s'\n\n", argv[optind]);
        usage(stderr, mode);
        return 2;
    }
    const char *missing = !p.prompt ? "-p PROMPT" : NULL;
    if (!missing && mode != MODE_TXT2IMG && !init_path) missing = "--init-image";
    if (!missing && mode == MODE_INPAINT && !mask_path) missing = "--mask";
    if (missing) {
        fprintf(stderr, "error: %s is required\n\n", missing);
        usage(stderr, mode);
        return 2;
    }
    if (mode == MODE_TXT2IMG && (init_path || mask_path || p.strength != 0.0)) {
        fprintf(stderr, "error: txt2img takes no --init-image, --mask or --strength (use img2img / inpaint)\n");
        return 2;
    }
    if (mode == MODE_IMG2IMG && mask_path) {
        fprintf(stderr, "error: img2img takes no --mask (use inpaint)\n");
        return 2;
    }
    p.seed = seed < 0 ? random_seed() : (uint64_t)seed;
    char default_path[4096];
    if (!model) {
        if (rb_sd_default_model(default_path, sizeof default_path, &err) != RB_OK) {
            fprintf(stderr, "error: no -m MODEL and no default model: %s\n", err.msg);
            return 2;
        }
        model = default_path;
    }

    int rc = 1;
    rb_backend *be = NULL;
    rb_sd_model *m = NULL;
    rb_image init = {0}, mask = {0};
    rb_sd_output out = {0};
    char *info = NULL;
    if (init_path) {
        if (!read_image(init_path, 3, &init)) goto done_quiet;
        p.init_image = &init;
    }
    if (mask_path) {
        if (!read_image(mask_path, 1, &mask)) goto done_quiet;
        p.mask = &mask;
    }
    rb_backend_config bc = {.n_threads = (int)threads};
    if (rb_backend_create(backend, &bc, &be, &err) != RB_OK) goto done;
    if (rb_sd_model_load(model, be, &mo, &m, &err) != RB_OK) goto done;
    rb_sd_model_info mi;
    rb_sd_model_get_info(m, &mi);
    if (!quiet)
        fprintf(stderr, "%s: %s (%s), %.1f MiB of weights on %s; seed %" PRIu64 "\n", mi.name, rb_sd_arch_name(mi.arch),
                mi.source, (double)mi.weight_bytes / (1024.0 * 1024.0), rb_backend_name(be), p.seed);
    rb_sd_callbacks cb = {.progress = progress, .user = quiet ? NULL : (void *)1};
    if (rb_sd_generate(m, &p, &cb, &out, &err) != RB_OK) goto done;
    for (int i = 0; i < out.count; i++) {
        if (rb_sd_infotext(m, &p, &out, i, &info, &err) != RB_OK) goto done;
        char key[] = "parameters";
        rb_png_text text = {.key = key, .text = info, .len = strlen(info)};
        rb_png_encode_opts po = {.compression = -1, .texts = &text, .n_texts = 1};
        uint8_t *png = NULL;
        size_t png_len = 0;
        if (rb_png_encode(&out.images[i], &po, &png, &png_len, &err) != RB_OK) goto done;
        char name[4096];
        output_name(output, i, out.count, name, sizeof name);
        const bool ok = write_file(name, png, png_len);
        free(png);
        free(info);
        info = NULL;
        if (!ok) {
            rc = 1;
            goto done_quiet;
        }
        printf("%s\n", name);
    }
    fprintf(stderr, "seed %" PRIu64 ": text %.0f ms, denoise %.0f ms (%d evaluations), decode %.0f ms\n", p.seed,
            out.text_ms, out.denoise_ms, out.n_evals, out.decode_ms);
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", err.msg[0] ? err.msg : "failed");
done_quiet:
    free(info);
    rb_sd_output_free(&out);
    rb_image_free(&init);
    rb_image_free(&mask);
    rb_sd_model_free(m);
    rb_backend_destroy(be);
    return rc;
}

int rb_cmd_txt2img(int argc, char **argv) { return run(argc, argv, MODE_TXT2IMG); }
int rb_cmd_img2img(int argc, char **argv) { return run(argc, argv, MODE_IMG2IMG); }
int rb_cmd_inpaint(int argc, char **argv) { return run(argc, argv, MODE_INPAINT); }
