/* GPU benchmarks, run by scripts/gpu-device-run.sh on the device machine
 * (not a ctest): `bench_gpu ops SPEC` times the device copy bandwidth, the
 * decode matrix-vector product for each weight dtype on a Llama-2-7B FFN
 * shape (11008 x 4096) and the prefill GEMM (M = 512); `bench_gpu model SPEC
 * DIR` loads a model folder and times pp512 and tg128 the way llama-bench
 * does. Prints one JSON object per measurement. Inputs are seeded random
 * values (never zeros). */
#include "rbee/backend.h"
#include "rbee/model.h"
#include "rbee/ops.h"
#include "rbee/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

#define CHECK(x)                                                                                               \
    do {                                                                                                       \
        rb_status s_ = (x);                                                                                    \
        if (s_ != RB_OK) {                                                                                     \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #x, rb_status_str(s_),                \
                    be ? rb_backend_last_error(be) : "");                                                      \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

/* A random tensor of dtype dt, shape [K, N], uploaded to be. */
static rb_tensor random_tensor(rb_backend *be, rb_dtype dt, int64_t K, int64_t N) {
    const int64_t ne[2] = {K, N};
    rb_tensor t;
    CHECK(rb_tensor_alloc(be, dt, 2, ne, &t));
    float *f = malloc(sizeof(float) * (size_t)(K * N));
    const size_t bytes = rb_dtype_row_size(dt, K) * (size_t)N;
    void *q = malloc(bytes);
    if (!f || !q) exit(1);
    for (int64_t i = 0; i < K * N; i++) f[i] = frand();
    CHECK(rb_quantize_rows(dt, f, q, N, K));
    CHECK(rb_tensor_set(&t, q, bytes));
    free(f);
    free(q);
    return t;
}

static int bench_ops(rb_backend *be) {
    /* device copy bandwidth: 1 GiB buffer to buffer, bytes read + written */
    const size_t cb = (size_t)1 << 30;
    rb_buffer *x = NULL, *y = NULL;
    CHECK(rb_buffer_alloc(be, cb, &x));
    CHECK(rb_buffer_alloc(be, cb, &y));
    CHECK(rb_buffer_copy(y, 0, x, 0, cb));
    CHECK(rb_backend_sync(be));
    double t0 = now();
    for (int i = 0; i < 20; i++) CHECK(rb_buffer_copy(y, 0, x, 0, cb));
    CHECK(rb_backend_sync(be));
    const double copy_bw = 2.0 * (double)cb * 20 / (now() - t0) / 1e9;
    printf("{\"bench\":\"copy\",\"GBps\":%.1f}\n", copy_bw);
    rb_buffer_free(x);
    rb_buffer_free(y);

    const rb_dtype dts[] = {RB_BF16, RB_F16, RB_Q8_0, RB_Q4_0, RB_Q4_K, RB_Q6_K};
    const int64_t K = 4096, N = 11008;
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        /* 4 weight matrices in rotation so the 50 MB L2 does not hold them */
        rb_tensor w[4];
        w[0] = random_tensor(be, dts[di], K, N);
        const size_t wbytes = rb_dtype_row_size(dts[di], K) * (size_t)N;
        for (int i = 1; i < 4; i++) {
            const int64_t ne[2] = {K, N};
            CHECK(rb_tensor_alloc(be, dts[di], 2, ne, &w[i]));
            CHECK(rb_buffer_copy(w[i].buf, 0, w[0].buf, 0, wbytes));
        }
        for (int64_t M = 1; M <= 512; M = M == 1 ? 8 : M * 64) {
            rb_tensor a = random_tensor(be, RB_F32, K, M), d;
            const int64_t dne[2] = {N, M};
            CHECK(rb_tensor_alloc(be, RB_F32, 2, dne, &d));
            for (int i = 0; i < 4; i++) CHECK(rb_matmul(be, &d, &w[i], &a));
            CHECK(rb_backend_sync(be));
            const int reps = M == 512 ? 20 : 200;
            t0 = now();
            for (int r = 0; r < reps; r++) CHECK(rb_matmul(be, &d, &w[r % 4], &a));
            CHECK(rb_backend_sync(be));
            const double dt = (now() - t0) / reps;
            const double gbps = (double)wbytes / dt / 1e9, tflops = 2.0 * (double)(K * N * M) / dt / 1e12;
            printf("{\"bench\":\"matmul\",\"wtype\":\"%s\",\"K\":%lld,\"N\":%lld,\"M\":%lld,\"us\":%.1f,"
                   "\"weight_GBps\":%.1f,\"roofline_ratio\":%.3f,\"TFLOPs\":%.2f}\n",
                   rb_dtype_name(dts[di]), (long long)K, (long long)N, (long long)M, dt * 1e6, gbps, gbps / copy_bw,
                   tflops);
            rb_tensor_free(&a);
            rb_tensor_free(&d);
        }
        for (int i = 0; i < 4; i++) rb_tensor_free(&w[i]);
    }
    return 0;
}

static int bench_model(rb_backend *be, const char *dir, double copy_bw) {
    rb_error err;
    rb_error_clear(&err);
    rb_model *m = NULL;
    double t0 = now();
    if (rb_model_load(dir, be, NULL, &m, &err) != RB_OK) {
        fprintf(stderr, "load %s: %s\n", dir, err.msg);
        return 1;
    }
    const double load_s = now() - t0;
    const rb_model_config *c = rb_model_get_config(m);
    rb_kv_cache *kv = NULL;
    if (rb_kv_cache_create(m, 1024, RB_F16, &kv, &err) != RB_OK) {
        fprintf(stderr, "kv: %s\n", err.msg);
        return 1;
    }
    int32_t *toks = malloc(sizeof(int32_t) * 512);
    float *logits = malloc(sizeof(float) * (size_t)c->n_vocab);
    if (!toks || !logits) return 1;
    for (int i = 0; i < 512; i++) toks[i] = (int32_t)(((int64_t)i * 7919 + 13) % c->n_vocab);
    /* warm-up */
    if (rb_model_forward(m, kv, toks, 16, false, logits, &err) != RB_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return 1;
    }
    rb_kv_cache_truncate(kv, 0);
    t0 = now();
    if (rb_model_forward(m, kv, toks, 512, false, logits, &err) != RB_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return 1;
    }
    const double pp = 512.0 / (now() - t0);
    rb_kv_cache_truncate(kv, 0);
    if (rb_model_forward(m, kv, toks, 1, false, logits, &err) != RB_OK) return 1;
    t0 = now();
    for (int i = 0; i < 128; i++)
        if (rb_model_forward(m, kv, &toks[(i + 1) % 512], 1, false, logits, &err) != RB_OK) {
            fprintf(stderr, "decode: %s\n", err.msg);
            return 1;
        }
    const double tg = 128.0 / (now() - t0);
    const double wb = (double)rb_model_weight_bytes(m);
    const double roof = copy_bw > 0 ? copy_bw * 1e9 / wb : 0;
    printf("{\"bench\":\"model\",\"dir\":\"%s\",\"wtype\":\"%s\",\"weight_GB\":%.2f,\"load_s\":%.1f,\"pp512\":%.1f,"
           "\"tg128\":%.1f,\"tg_roofline\":%.1f,\"tg_ratio\":%.3f}\n",
           dir, rb_dtype_name(rb_model_weight_dtype(m)), wb / 1e9, load_s, pp, tg, roof, roof > 0 ? tg / roof : 0);
    free(toks);
    free(logits);
    rb_kv_cache_free(kv);
    rb_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_gpu ops SPEC | bench_gpu model SPEC DIR [copy_GBps]\n");
        return 2;
    }
    rb_backend *be = NULL;
    rb_error err;
    rb_error_clear(&err);
    if (rb_backend_create(argv[2], NULL, &be, &err) != RB_OK) {
        fprintf(stderr, "%s: %s\n", argv[2], err.msg);
        return 1;
    }
    int rc = 2;
    if (strcmp(argv[1], "ops") == 0) rc = bench_ops(be);
    else if (strcmp(argv[1], "model") == 0 && argc >= 4) rc = bench_model(be, argv[3], argc > 4 ? atof(argv[4]) : 0);
    rb_backend_destroy(be);
    return rc;
}
