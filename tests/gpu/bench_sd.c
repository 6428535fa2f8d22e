/* Denoiser step benchmark (not a ctest; run on the device machine by
 * scripts/gpu-prebuilt.sh `sd`): `bench_sd [SPEC] [--preset
 * sd15|sd21|sdxl|sd3m|sd35m] [--dtype f16|bf16|f32] [--batch B] [--latent N]
 * [--t5-tokens T] [--reps R] [--ops] [--own-conv] [--no-lt]` builds the preset's UNet
 * (SD3: MMDiT) at its published shapes with random weights
 * (rb_sd_model_create_random), weights and activations in dtype, and times
 * rb_unet_forward / rb_mmdit_forward at batch B (the CFG pair: 2) on N x N
 * latents (64 for SD1.5, 96 SD2.1, 128 for SDXL and SD3) against 77 context
 * tokens (SD3: 77 CLIP + T T5 tokens, default 256, and the pooled text):
 * the median of R timed steps after 2 warm-up steps, each step
 * synchronised.
 *
 * --ops adds one instrumented step: every op the UNet calls is timed with
 * the backend synchronised before and after it, the empty round trip
 * (measured, median of 200) subtracted, and the times summed per kind
 * (convolution, attention, matrix product, linear layer with its fused
 * epilogue, group norm, layer norm (also with adaLN modulation), rms norm,
 * binary ops, casts, gated units, other elementwise ops, resampling), so the sum
 * shows where a step's time goes; the synchronisation
 * removes the overlap of launches, so the instrumented step is longer than a
 * plain one (each op's time includes its launch, ~5 us on an H100). This wraps the backend's operation table in place (a copy with
 * timing entries, core/backend_impl.h), which only a benchmark may do.
 * --own-conv runs every convolution by the GPU backend's own kernels where
 * it would use cuDNN (rb_gpu_tuning.own_conv), for an A/B of the two; the
 * device line printed first says whether cuDNN is loaded ("cudnn-9.x.y" in
 * its features) and the last line how many convolutions each path ran.
 * --no-lt puts every linear layer's bias through the GPU backend's own
 * epilogue kernel after the GEMM where it would use cuBLASLt's epilogue
 * (rb_gpu_tuning.no_lt_epilogue), for an A/B of the two.
 * Prints a table and one JSON line per measurement. */
#include "backends/gpu/gpu_tuning.h"
#include "core/backend_impl.h"
#include "rbee/backend.h"
#include "rbee/ops.h"
#include "rbee/sd_model.h"
#include "rbee/sd_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define DIE(...)                                                                                               \
    do {                                                                                                       \
        fprintf(stderr, __VA_ARGS__);                                                                          \
        fputc('\n', stderr);                                                                                   \
        exit(1);                                                                                               \
    } while (0)

#define CHECK(be, x)                                                                                           \
    do {                                                                                                       \
        rb_status s_ = (x);                                                                                    \
        if (s_ != RB_OK) DIE("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #x, rb_status_str(s_),                  \
                             rb_backend_last_error(be));                                                       \
    } while (0)

/* ---- per-op timing: a copy of the backend's table with timing entries ---- */

enum { K_CONV, K_ATTN, K_MATMUL, K_LINEAR, K_GNORM, K_LNORM, K_RMS, K_BINARY, K_CAST, K_GLU, K_UNARY, K_RESAMPLE,
       K_COUNT };
static const char *const k_kind_name[K_COUNT] = {"conv2d", "attention", "matmul", "linear+epilogue", "group_norm",
                                                 "layer_norm(+mod)", "rms_norm", "binary", "cast", "glu",
                                                 "unary/affine/fill", "upsample"};

typedef struct op_timer {
    rb_backend_vtable vt; /* first: the backend's vt points here while timing */
    const rb_backend_vtable *orig;
    double ms[K_COUNT], trip_ms;
    long calls[K_COUNT];
} op_timer;

static op_timer *timer_of(rb_backend *be) { return (op_timer *)(uintptr_t)be->vt; }

static double t_begin(rb_backend *be) {
    (void)timer_of(be)->orig->sync(be);
    return now_ms();
}

static void t_end(rb_backend *be, int kind, double t0) {
    op_timer *t = timer_of(be);
    (void)t->orig->sync(be);
    double dt = now_ms() - t0 - t->trip_ms;
    t->ms[kind] += dt > 0 ? dt : 0;
    t->calls[kind]++;
}

#define TIMED(kind, call)                                                                                      \
    do {                                                                                                       \
        const double t0_ = t_begin(be);                                                                        \
        rb_status s_ = timer_of(be)->orig->call;                                                               \
        t_end(be, kind, t0_);                                                                                  \
        return s_;                                                                                             \
    } while (0)

static rb_status w_fill(rb_backend *be, rb_tensor *d, float v) { TIMED(K_UNARY, fill(be, d, v)); }
static rb_status w_affine(rb_backend *be, rb_tensor *d, const rb_tensor *s, float a, float b) {
    TIMED(K_UNARY, affine(be, d, s, a, b));
}
static rb_status w_unary(rb_backend *be, rb_unary_op op, rb_tensor *d, const rb_tensor *s) {
    TIMED(K_UNARY, unary(be, op, d, s));
}
static rb_status w_binary(rb_backend *be, rb_binary_op op, rb_tensor *d, const rb_tensor *a, const rb_tensor *b) {
    TIMED(K_BINARY, binary(be, op, d, a, b));
}
static rb_status w_glu(rb_backend *be, rb_tensor *d, const rb_tensor *g, const rb_tensor *u, rb_unary_op act) {
    TIMED(K_GLU, glu(be, d, g, u, act));
}
static rb_status w_cast(rb_backend *be, rb_tensor *d, const rb_tensor *s) { TIMED(K_CAST, cast(be, d, s)); }
static rb_status w_layer_norm(rb_backend *be, rb_tensor *d, const rb_tensor *s, const rb_tensor *w, const rb_tensor *b,
                              float eps) {
    TIMED(K_LNORM, layer_norm(be, d, s, w, b, eps));
}
static rb_status w_layer_norm_mod(rb_backend *be, rb_tensor *d, const rb_tensor *s, const rb_tensor *sh,
                                  const rb_tensor *sc, float eps) {
    TIMED(K_LNORM, layer_norm_mod(be, d, s, sh, sc, eps));
}
static rb_status w_rms_norm(rb_backend *be, rb_tensor *d, const rb_tensor *s, const rb_tensor *w, float eps) {
    TIMED(K_RMS, rms_norm(be, d, s, w, eps));
}
static rb_status w_linear(rb_backend *be, rb_tensor *d, const rb_tensor *a, const rb_tensor *b,
                          const rb_linear_epilogue *ep) {
    TIMED(K_LINEAR, linear(be, d, a, b, ep));
}
static rb_status w_group_norm(rb_backend *be, rb_tensor *d, const rb_tensor *s, int g, const rb_tensor *w,
                              const rb_tensor *b, float eps) {
    TIMED(K_GNORM, group_norm(be, d, s, g, w, b, eps));
}
static rb_status w_group_norm_act(rb_backend *be, rb_tensor *d, const rb_tensor *s, int g, const rb_tensor *w,
                                  const rb_tensor *b, float eps, rb_unary_op act) {
    TIMED(K_GNORM, group_norm_act(be, d, s, g, w, b, eps, act));
}
static rb_status w_matmul(rb_backend *be, rb_tensor *d, const rb_tensor *a, const rb_tensor *b) {
    TIMED(K_MATMUL, matmul(be, d, a, b));
}
static rb_status w_attention(rb_backend *be, rb_tensor *d, const rb_tensor *q, const rb_tensor *k, const rb_tensor *v,
                             const rb_attn_params *p) {
    TIMED(K_ATTN, attention(be, d, q, k, v, p));
}
static rb_status w_conv2d(rb_backend *be, rb_tensor *d, const rb_tensor *x, const rb_tensor *w, const rb_tensor *b,
                          const int s[2], const int p[2], const int dl[2], int g) {
    TIMED(K_CONV, conv2d(be, d, x, w, b, s, p, dl, g));
}
static rb_status w_upsample(rb_backend *be, rb_tensor *d, const rb_tensor *s, rb_upsample_mode m) {
    TIMED(K_RESAMPLE, upsample(be, d, s, m));
}

/* Installs the timing table on be (the original stays in t->orig). */
static void timer_install(rb_backend *be, op_timer *t) {
    memset(t, 0, sizeof *t);
    t->orig = be->vt;
    t->vt = *be->vt;
    t->vt.fill = w_fill;
    t->vt.affine = w_affine;
    t->vt.unary = w_unary;
    t->vt.binary = w_binary;
    t->vt.glu = w_glu;
    t->vt.cast = w_cast;
    t->vt.layer_norm = w_layer_norm;
    t->vt.rms_norm = w_rms_norm;
    if (t->vt.layer_norm_mod) t->vt.layer_norm_mod = w_layer_norm_mod;
    if (t->vt.linear) t->vt.linear = w_linear;
    t->vt.group_norm = w_group_norm;
    if (t->vt.group_norm_act) t->vt.group_norm_act = w_group_norm_act;
    t->vt.matmul = w_matmul;
    t->vt.attention = w_attention;
    t->vt.conv2d = w_conv2d;
    t->vt.upsample = w_upsample;
    /* the empty round trip: two synchronisations with nothing queued */
    double trips[200];
    for (int i = 0; i < 200; i++) {
        (void)t->orig->sync(be);
        const double t0 = now_ms();
        (void)t->orig->sync(be);
        trips[i] = now_ms() - t0;
    }
    t->trip_ms = median(trips, 200);
    be->vt = &t->vt;
}

static void timer_remove(rb_backend *be, op_timer *t) { be->vt = t->orig; }

/* ---- the step ---- */

static void fill_random(float *v, int64_t n, uint64_t *s, float scale) {
    for (int64_t i = 0; i < n; i++) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        v[i] = scale * ((float)((double)(*s >> 11) / 9007199254740992.0) * 2.0f - 1.0f);
    }
}

static rb_tensor host_tensor(rb_backend *be, int64_t a, int64_t b, int64_t c, int64_t d, uint64_t *seed, float scale) {
    const int64_t ne[4] = {a, b, c, d}, n = a * b * c * d;
    rb_tensor t;
    CHECK(be, rb_tensor_alloc(be, RB_F32, 4, ne, &t));
    float *h = malloc(sizeof(float) * (size_t)n);
    if (!h) DIE("out of memory");
    fill_random(h, n, seed, scale);
    CHECK(be, rb_tensor_set(&t, h, sizeof(float) * (size_t)n));
    free(h);
    return t;
}

/* The denoiser under test and its inputs. */
typedef struct den {
    rb_unet *u;
    rb_mmdit *dit;
    rb_unet_inputs uin;
    rb_mmdit_inputs din;
} den;

static rb_status step(den *d, rb_tensor *out, rb_error *err) {
    return d->dit ? rb_mmdit_forward(d->dit, &d->din, out, err) : rb_unet_forward(d->u, &d->uin, out, err);
}

int main(int argc, char **argv) {
    const char *spec = "cuda:0", *preset = "sd15", *dts = "f16";
    int batch = 2, latent = 0, reps = 10, t5_tokens = 256;
    bool ops = false, own_conv = false, no_lt = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dts = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--latent") && i + 1 < argc) latent = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--t5-tokens") && i + 1 < argc) t5_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ops")) ops = true;
        else if (!strcmp(argv[i], "--own-conv")) own_conv = true;
        else if (!strcmp(argv[i], "--no-lt")) no_lt = true;
        else if (argv[i][0] != '-') spec = argv[i];
        else DIE("usage: bench_sd [SPEC] [--preset sd15|sd21|sdxl|sd3m|sd35m] [--dtype f16|bf16|f32] [--batch B] "
                 "[--latent N] [--t5-tokens T] [--reps R] [--ops] [--own-conv] [--no-lt]");
    }
    const rb_dtype dt = !strcmp(dts, "f32") ? RB_F32 : !strcmp(dts, "bf16") ? RB_BF16 : RB_F16;
    if (batch < 1 || batch > 16 || reps < 1 || reps > 1000 || t5_tokens < 1 || t5_tokens > 512)
        DIE("bad --batch, --reps or --t5-tokens");
    const bool sd3 = !strncmp(preset, "sd3", 3);
    if (latent <= 0) latent = !strcmp(preset, "sdxl") || sd3 ? 128 : !strcmp(preset, "sd21") ? 96 : 64;
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(spec, NULL, &be, &err) != RB_OK) DIE("backend %s: %s", spec, err.msg);
    const rb_gpu_tuning tune = {.own_conv = own_conv, .no_lt_epilogue = no_lt};
    if ((own_conv || no_lt) && rb_gpu_backend_tune(be, &tune) != RB_OK)
        DIE("--own-conv / --no-lt: %s is not a GPU backend", spec);
    rb_device_info di;
    if (rb_backend_device_info(be, &di) == RB_OK)
        fprintf(stderr, "%s: %s, %s%s%s\n", spec, di.name, di.features, own_conv ? " (--own-conv)" : "",
                no_lt ? " (--no-lt)" : "");
    rb_sd_model_opts mo;
    rb_sd_model_opts_init(&mo);
    mo.weight_dtype = dt;
    mo.components = RB_SD_LOAD_UNET;
    rb_sd_model *m = NULL;
    double t0 = now_ms();
    if (rb_sd_model_create_random(preset, be, &mo, 1234, &m, &err) != RB_OK) DIE("model %s: %s", preset, err.msg);
    den d = {.u = rb_sd_model_unet(m), .dit = rb_sd_model_mmdit(m)};
    if (!d.u && !d.dit) DIE("no denoiser");
    size_t wbytes;
    int64_t cin, cout, cdim, tokens = 77, pooled = 0;
    bool text_time = false;
    if (d.dit) {
        if (rb_mmdit_set_act_dtype(d.dit, dt, &err) != RB_OK) DIE("%s", err.msg);
        const rb_mmdit_config *c = rb_mmdit_get_config(d.dit);
        wbytes = rb_mmdit_weight_bytes(d.dit);
        cin = c->in_channels;
        cout = c->out_channels;
        cdim = c->joint_attention_dim;
        tokens += t5_tokens;
        pooled = c->pooled_projection_dim;
    } else {
        if (rb_unet_set_act_dtype(d.u, dt, &err) != RB_OK) DIE("%s", err.msg);
        const rb_unet_config *c = rb_unet_get_config(d.u);
        wbytes = rb_unet_weight_bytes(d.u);
        cin = c->in_channels;
        cout = c->out_channels;
        cdim = c->cross_attention_dim;
        text_time = c->add_text_time;
        if (text_time) pooled = c->projection_class_embeddings_input_dim - 6 * c->addition_time_embed_dim;
    }
    const char *den_name = d.dit ? "MMDiT" : "UNet";
    fprintf(stderr, "%s %s: %.1f M weights bytes %.0f MB, built in %.1f s\n", preset, den_name,
            (double)wbytes / (dt == RB_F32 ? 4e6 : 2e6), (double)wbytes / 1e6, (now_ms() - t0) / 1e3);

    uint64_t seed = 0x9E3779B97F4A7C15ull;
    rb_tensor x = host_tensor(be, latent, latent, cin, batch, &seed, 1.0f);
    rb_tensor ctx = host_tensor(be, cdim, tokens, batch, 1, &seed, 1.0f);
    rb_tensor out;
    const int64_t one[4] = {latent, latent, cout, batch};
    CHECK(be, rb_tensor_alloc(be, RB_F32, 4, one, &out));
    float ts[16], tid[16 * 6];
    for (int b = 0; b < batch; b++) ts[b] = 500.0f;
    rb_unet_inputs in = {.sample = &x, .timesteps = ts, .context = &ctx};
    rb_tensor te = {0};
    if (d.dit) {
        te = host_tensor(be, pooled, batch, 1, 1, &seed, 1.0f);
        d.din = (rb_mmdit_inputs){.sample = &x, .context = &ctx, .pooled = &te, .timesteps = ts};
    } else if (text_time) {
        const int64_t Dt = pooled;
        te = host_tensor(be, Dt, batch, 1, 1, &seed, 1.0f);
        for (int b = 0; b < batch; b++) {
            const float v[6] = {(float)(8 * latent), (float)(8 * latent), 0, 0, (float)(8 * latent), (float)(8 * latent)};
            memcpy(tid + 6 * b, v, sizeof v);
        }
        in.text_embeds = &te;
        in.time_ids = tid;
        in.n_time_ids = 6;
    }
    d.uin = in;
    size_t act = 0;
    if (d.u && rb_unet_scratch_bytes(d.u, &in, &act, &err) != RB_OK) DIE("%s", err.msg);
    for (int w = 0; w < 2; w++)
        if (step(&d, &out, &err) != RB_OK) DIE("forward: %s", err.msg);
    CHECK(be, rb_backend_sync(be));
    double *ms = malloc(sizeof(double) * (size_t)reps);
    if (!ms) DIE("out of memory");
    for (int r = 0; r < reps; r++) {
        t0 = now_ms();
        if (step(&d, &out, &err) != RB_OK) DIE("forward: %s", err.msg);
        CHECK(be, rb_backend_sync(be));
        ms[r] = now_ms() - t0;
    }
    double mn = ms[0];
    for (int r = 1; r < reps; r++) mn = ms[r] < mn ? ms[r] : mn;
    const double med = median(ms, reps);
    /* a finite output (random weights scaled to keep activations bounded) */
    const int64_t nout = (int64_t)latent * latent * cout * batch;
    float *h = malloc(sizeof(float) * (size_t)nout);
    if (!h) DIE("out of memory");
    CHECK(be, rb_tensor_get(&out, h, sizeof(float) * (size_t)nout));
    int64_t nonfinite = 0;
    double amax = 0;
    for (int64_t i = 0; i < nout; i++) {
        if (!isfinite(h[i])) nonfinite++;
        else amax = fabs(h[i]) > amax ? fabs(h[i]) : amax;
    }
    free(h);
    printf("%s %s step, batch %d, %dx%d latents, %lld context tokens, %s on %s: median %.2f ms (min %.2f) over %d; "
           "activations %.0f MB; output max|x| %.3g, %lld non-finite\n",
           preset, den_name, batch, latent, latent, (long long)tokens, dts, rb_backend_name(be), med, mn, reps,
           (double)act / 1e6, amax, (long long)nonfinite);
    printf("{\"bench\":\"%s\",\"preset\":\"%s\",\"dtype\":\"%s\",\"batch\":%d,\"latent\":%d,\"tokens\":%lld,"
           "\"median_ms\":%.3f,\"min_ms\":%.3f,\"reps\":%d,\"nonfinite\":%lld}\n",
           d.dit ? "mmdit_step" : "unet_step", preset, dts, batch, latent, (long long)tokens, med, mn, reps,
           (long long)nonfinite);
    if (ops) {
        op_timer t;
        timer_install(be, &t);
        t0 = now_ms();
        if (step(&d, &out, &err) != RB_OK) DIE("forward: %s", err.msg);
        (void)t.orig->sync(be);
        const double total = now_ms() - t0;
        timer_remove(be, &t);
        double sum = 0;
        long n = 0;
        for (int k = 0; k < K_COUNT; k++) {
            sum += t.ms[k];
            n += t.calls[k];
        }
        printf("per-op time of one instrumented step (%.2f ms with a sync around each of %ld ops; round trip %.1f us "
               "subtracted):\n",
               total, n, 1e3 * t.trip_ms);
        for (int k = 0; k < K_COUNT; k++) {
            printf("  %-18s %5ld calls %9.3f ms %5.1f%%\n", k_kind_name[k], t.calls[k], t.ms[k],
                   sum > 0 ? 100.0 * t.ms[k] / sum : 0.0);
            printf("{\"bench\":\"unet_ops\",\"preset\":\"%s\",\"dtype\":\"%s\",\"kind\":\"%s\",\"calls\":%ld,\"ms\":%.3f}\n",
                   preset, dts, k_kind_name[k], t.calls[k], t.ms[k]);
        }
        printf("  %-18s %5ld calls %9.3f ms\n", "sum", n, sum);
    }
    free(ms);
    rb_tensor_free(&x);
    rb_tensor_free(&ctx);
    rb_tensor_free(&out);
    if (te.buf) rb_tensor_free(&te);
    rb_sd_model_free(m);
    rb_gpu_conv_stats cst;
    if (rb_gpu_backend_conv_stats(be, &cst) == RB_OK)
        fprintf(stderr, "convolutions: %llu through cuDNN (%s), %llu by our kernels\n", cst.cudnn_convs,
                cst.cudnn_loaded ? "loaded" : "not loaded", cst.own_convs);
    rb_backend_destroy(be);
    return 0;
}
