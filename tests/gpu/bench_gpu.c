/* GPU benchmarks, run on the device machine by scripts/gpu-prebuilt.sh
 * (steps ops, q8, attn and moe; not a ctest): `bench_gpu ops SPEC` times the
 * device copy bandwidth, the decode matrix-vector products (M = 1..32) for
 * each weight dtype on three Llama-2-7B shapes and the prefill GEMM (M =
 * 512), see bench_matvec; `bench_gpu q8 SPEC` the int8 tensor-core products
 * of quantized weights against the paths before them (bench_q8);
 * `bench_gpu attn SPEC` times attention (bench_attn: the LLM shapes, then
 * the diffusion networks' with both tensor-core kernels);
 * `bench_gpu moe SPEC` times the expert products (bench_moe). Whole models:
 * `rbee bench`. Prints one JSON object per measurement. Inputs are seeded
 * random values (never zeros). */
#include "backends/gpu/gpu_tuning.h"
#include "rbee/backend.h"
#include "rbee/ops.h"
#include "rbee/quant.h"

#include <math.h>
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

/* ---- matrix-vector products (decode), `bench_gpu ops` ----
 * Shapes K x N = 4096 x 11008, 4096 x 4096, 11008 x 4096 (Llama-2-7B FFN up,
 * attention, FFN down), M = 1, 2, 4, 8, 16, 32 f32 activation rows, every
 * weight type; plus the GEMM path (M = 64, 128: many streams' decode; 512:
 * prefill) on the first shape, and where gemm_q8.cuh (quantized, M = 9..64)
 * or cuBLAS (float weights, M = 5..32) takes a product, the path before
 * them too (the tuning's no_gemm_q8 and mv_max_m = 32). Weights
 * rotate over >= 8 copies and >= 200 MB, so the L2 (50-60 MB) cannot hold
 * them. A run is a batch of calls (>= one pass over the copies, >= ~2 ms),
 * timed by wall clock to rb_backend_sync; the time per call is the median of
 * 50 runs: eager (back-to-back calls) and, where the backend has graphs, one
 * graph replay per run (no launch gaps; how a captured decode step runs).
 * GB/s = weight bytes / time; ratio = that / the measured copy bandwidth.
 * RBEE_BENCH_QUICK=1: the first shape, M = 1, 8, 32, 64, 128 only (tuning runs). */
#define MVB_ROT_MAX 64
#define MVB_RUNS 50

static int mvb_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* random [K, N] weights of dtype dt: 256 random rows repeated */
static rb_tensor mvb_weights(rb_backend *be, rb_dtype dt, int64_t K, int64_t N) {
    const int64_t R = N < 256 ? N : 256;
    const size_t rs = rb_dtype_row_size(dt, K);
    float *f = malloc(sizeof(float) * (size_t)(K * R));
    unsigned char *q = malloc(rs * (size_t)N);
    if (!f || !q) exit(1);
    for (int64_t i = 0; i < K * R; i++) f[i] = frand();
    CHECK(rb_quantize_rows(dt, f, q, R, K));
    for (int64_t r = R; r < N; r++) memcpy(q + (size_t)r * rs, q + (size_t)(r % R) * rs, rs);
    const int64_t ne[2] = {K, N};
    rb_tensor t;
    CHECK(rb_tensor_alloc(be, dt, 2, ne, &t));
    CHECK(rb_tensor_set(&t, q, rs * (size_t)N));
    CHECK(rb_buffer_set_constant(t.buf)); /* as a model's weights: read ahead where the backend can */
    free(f);
    free(q);
    return t;
}

/* median time per call of n calls of w[i % nrot] x a -> d; graph: replayed */
static double mvb_time(rb_backend *be, rb_tensor *d, rb_tensor *w, int nrot, rb_tensor *a, int n, bool graph) {
    rb_graph *gr = NULL;
    if (graph) { /* a capture that fails is reported as 0 (not fatal) */
        if (rb_backend_capture_begin(be) != RB_OK) return 0;
        rb_status s = RB_OK;
        for (int i = 0; i < n && s == RB_OK; i++) s = rb_matmul(be, d, &w[i % nrot], a);
        const rb_status e = rb_backend_capture_end(be, &gr);
        if (s != RB_OK || e != RB_OK || !gr) {
            fprintf(stderr, "graph capture failed: %s\n", rb_backend_last_error(be));
            rb_graph_free(gr);
            return 0;
        }
        CHECK(rb_graph_launch(gr));
        CHECK(rb_backend_sync(be));
    }
    double ts[MVB_RUNS];
    for (int r = 0; r < MVB_RUNS; r++) {
        const double t0 = now();
        if (gr) CHECK(rb_graph_launch(gr));
        else
            for (int i = 0; i < n; i++) CHECK(rb_matmul(be, d, &w[i % nrot], a));
        CHECK(rb_backend_sync(be));
        ts[r] = (now() - t0) / n;
    }
    rb_graph_free(gr);
    qsort(ts, MVB_RUNS, sizeof ts[0], mvb_cmp);
    return ts[MVB_RUNS / 2];
}

static int bench_matvec(rb_backend *be, double copy_bw) {
    const rb_dtype dts[] = {RB_F32, RB_BF16, RB_F16, RB_Q8_0, RB_Q4_0, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    const int64_t shapes[3][2] = {{4096, 11008}, {4096, 4096}, {11008, 4096}};
    const int64_t Ms[] = {1, 2, 4, 8, 16, 32, 64, 128, 512};
    const bool graphs = rb_backend_graphs_supported(be);
    const bool quick = getenv("RBEE_BENCH_QUICK") && atoi(getenv("RBEE_BENCH_QUICK")) > 0;
    enum { NS = 3, ND = sizeof dts / sizeof dts[0], NM = 6 };
    static double ratio[NS][ND][NM][2];
    for (int si = 0; si < NS; si++)
        for (int di = 0; di < ND; di++) {
            const int64_t K = shapes[si][0], N = shapes[si][1];
            if (quick && si > 0) continue;
            const size_t wbytes = rb_dtype_row_size(dts[di], K) * (size_t)N;
            int nrot = (int)(((size_t)200 << 20) / wbytes + 1);
            if (nrot < 8) nrot = 8;
            if (nrot > MVB_ROT_MAX) nrot = MVB_ROT_MAX;
            rb_tensor w[MVB_ROT_MAX];
            w[0] = mvb_weights(be, dts[di], K, N);
            for (int i = 1; i < nrot; i++) {
                const int64_t ne[2] = {K, N};
                CHECK(rb_tensor_alloc(be, dts[di], 2, ne, &w[i]));
                CHECK(rb_buffer_copy(w[i].buf, 0, w[0].buf, 0, wbytes));
            }
            for (int mi = 0; mi < (int)(sizeof Ms / sizeof Ms[0]); mi++) {
                const int64_t M = Ms[mi];
                if (M > 32 && si > 0) continue; /* GEMM: first shape only */
                if (quick && M != 1 && M != 8 && M != 32 && M != 64 && M != 128) continue;
                rb_tensor a = random_tensor(be, RB_F32, K, M), d;
                const int64_t dne[2] = {N, M};
                CHECK(rb_tensor_alloc(be, RB_F32, 2, dne, &d));
                for (int i = 0; i < nrot; i++) CHECK(rb_matmul(be, &d, &w[i], &a)); /* warm-up, scratch */
                CHECK(rb_backend_sync(be));
                double t0 = now();
                for (int i = 0; i < nrot; i++) CHECK(rb_matmul(be, &d, &w[i], &a));
                CHECK(rb_backend_sync(be));
                const double est = (now() - t0) / nrot;
                int n = nrot * (int)(1.5e-3 / (est * nrot) + 1);
                if (n > 4096) n = nrot * (4096 / nrot);
                if (M > 32) n = nrot;
                const double te = mvb_time(be, &d, w, nrot, &a, n, false);
                const double tg = graphs && M <= 32 ? mvb_time(be, &d, w, nrot, &a, n, true) : 0;
                const double ge = (double)wbytes / te / 1e9, gg = tg > 0 ? (double)wbytes / tg / 1e9 : 0;
                printf("{\"bench\":\"matmul\",\"wtype\":\"%s\",\"K\":%lld,\"N\":%lld,\"M\":%lld,\"rot\":%d,\"calls\":%d,"
                       "\"us\":%.2f,\"weight_GBps\":%.1f,\"roofline_ratio\":%.3f,\"graph_us\":%.2f,"
                       "\"graph_GBps\":%.1f,\"graph_ratio\":%.3f,\"TFLOPs\":%.2f}\n",
                       rb_dtype_name(dts[di]), (long long)K, (long long)N, (long long)M, nrot, n, te * 1e6, ge,
                       ge / copy_bw, tg * 1e6, gg, gg / copy_bw, 2.0 * (double)(K * N * M) / te / 1e12);
                /* the path before gemm_q8.cuh and cuBLAS for float weights of 5..32 rows: the
                 * matrix-vector kernels up to 32 rows, the GEMM (q4_0 / q8_0: dequantized) above */
                const bool q8 = rb_dtype_info((int)dts[di])->is_quant, fl = !q8; /* every quantized type here */
                const rb_gpu_tuning alt = {.no_gemm_q8 = true, .mv_max_m = 32}, dflt = {0};
                if (((q8 && M > 8 && M <= 64) || (fl && M > 4 && M <= 32)) && rb_gpu_backend_tune(be, &alt) == RB_OK) {
                    for (int i = 0; i < nrot; i++) CHECK(rb_matmul(be, &d, &w[i], &a));
                    const double tq = mvb_time(be, &d, w, nrot, &a, n, false);
                    const double tqg = graphs && M <= 32 ? mvb_time(be, &d, w, nrot, &a, n, true) : 0;
                    printf("{\"bench\":\"matmul\",\"path\":\"%s\",\"wtype\":\"%s\",\"K\":%lld,"
                           "\"N\":%lld,\"M\":%lld,\"us\":%.2f,\"graph_us\":%.2f,\"TFLOPs\":%.2f}\n",
                           M > 32 ? "before: dequantize+gemm" : "before: matrix-vector", rb_dtype_name(dts[di]), (long long)K,
                           (long long)N, (long long)M, tq * 1e6, tqg * 1e6, 2.0 * (double)(K * N * M) / tq / 1e12);
                    CHECK(rb_gpu_backend_tune(be, &dflt));
                }
                fflush(stdout);
                if (mi < NM) {
                    ratio[si][di][mi][0] = ge / copy_bw;
                    ratio[si][di][mi][1] = gg / copy_bw;
                }
                rb_tensor_free(&a);
                rb_tensor_free(&d);
            }
            for (int i = 0; i < nrot; i++) rb_tensor_free(&w[i]);
        }
    printf("\nweight GB/s / copy GB/s (%.0f), eager | graph replay, median of %d runs\n", copy_bw, MVB_RUNS);
    printf("| K x N | weights |");
    for (int mi = 0; mi < NM; mi++) printf(" M=%lld |", (long long)Ms[mi]);
    printf("\n|---|---|");
    for (int mi = 0; mi < NM; mi++) printf("---|");
    printf("\n");
    for (int si = 0; si < NS; si++)
        for (int di = 0; di < ND; di++) {
            printf("| %lldx%lld | %s |", (long long)shapes[si][0], (long long)shapes[si][1], rb_dtype_name(dts[di]));
            for (int mi = 0; mi < NM; mi++) printf(" %.2f %.2f |", ratio[si][di][mi][0], ratio[si][di][mi][1]);
            printf("\n");
        }
    return 0;
}

/* ---- int8 tensor-core products, `bench_gpu q8 SPEC` ----
 * q4_0, q8_0, q4_K, q5_K and q6_K weights at K x N = 4096 x 4096, 4096 x
 * 14336 (Llama-3-8B attention, FFN up) and 2048 x 8192 (Llama-3.2-1B FFN
 * up), M = 1, 4, 8, 16, 32, 64, 128, 256 f32 activation rows: the default
 * path and beside it
 *   before: the paths before gemm_q8.cuh took these products (the tuning's
 *           no_gemm_q8: matrix-vector kernels up to 32 rows, dequantize +
 *           cuBLAS above);
 *   first:  q4_0 / q8_0 at 9..64 rows by the first, unpipelined int8 kernel
 *           (gemm_q8_plain);
 *   q8:     gemm_q8.cuh at an M the default gives another path
 *           (gemm_q8_min_m = 1, gemm_q8_max_m = 256: where its row range
 *           should end);
 *   whole:  gemm_q8.cuh without splitting K (gemm_q8_split = 1) where the
 *           default takes it (whether its split rule pays).
 * Times as bench_matvec's (weights rotate over >= 200 MB; median of 50
 * runs, eager and one graph replay a run); GB/s = weight bytes / time,
 * ratio = that / the copy bandwidth. Ends with a table of the times (us,
 * graph replay). */
static int bench_q8(rb_backend *be, double copy_bw) {
    const rb_dtype dts[] = {RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    const int64_t shapes[3][2] = {{4096, 4096}, {4096, 14336}, {2048, 8192}};
    const int64_t Ms[] = {1, 4, 8, 16, 32, 64, 128, 256};
    enum { NS = 3, ND = 5, NM = 8, NV = 5 };
    const char *vname[NV] = {"default", "before", "first", "q8", "whole"};
    static double tab[NS][ND][NM][NV];
    const bool graphs = rb_backend_graphs_supported(be);
    for (int si = 0; si < NS; si++)
        for (int di = 0; di < ND; di++) {
            const int64_t K = shapes[si][0], N = shapes[si][1];
            const size_t wbytes = rb_dtype_row_size(dts[di], K) * (size_t)N;
            int nrot = (int)(((size_t)200 << 20) / wbytes + 1);
            if (nrot < 8) nrot = 8;
            if (nrot > MVB_ROT_MAX) nrot = MVB_ROT_MAX;
            rb_tensor w[MVB_ROT_MAX];
            w[0] = mvb_weights(be, dts[di], K, N);
            for (int i = 1; i < nrot; i++) {
                const int64_t ne[2] = {K, N};
                CHECK(rb_tensor_alloc(be, dts[di], 2, ne, &w[i]));
                CHECK(rb_buffer_copy(w[i].buf, 0, w[0].buf, 0, wbytes));
                CHECK(rb_buffer_set_constant(w[i].buf));
            }
            const bool q40 = dts[di] == RB_Q4_0 || dts[di] == RB_Q8_0;
            for (int mi = 0; mi < NM; mi++) {
                const int64_t M = Ms[mi];
                rb_tensor a = random_tensor(be, RB_F32, K, M), d;
                const int64_t dne[2] = {N, M};
                CHECK(rb_tensor_alloc(be, RB_F32, 2, dne, &d));
                for (int v = 0; v < NV; v++) {
                    rb_gpu_tuning t = {0};
                    if (v == 1) t.no_gemm_q8 = true;
                    if (v == 2) t.gemm_q8_plain = true;
                    if (v == 3) {
                        t.gemm_q8_min_m = 1;
                        t.gemm_q8_max_m = 256;
                    }
                    if (v == 4) t.gemm_q8_split = 1;
                    /* the variants that take a path of their own at this M */
                    const bool run = v == 0 || (v == 1 && M > 8) || (v == 2 && q40 && M > 8 && M <= 64) ||
                                     (v == 3 && (M <= 8 || M > 64)) || (v == 4 && M > 8 && M <= 64);
                    tab[si][di][mi][v] = 0;
                    if (!run) continue;
                    if (rb_gpu_backend_tune(be, &t) != RB_OK && v > 0) continue; /* not a GPU: the default only */
                    for (int i = 0; i < nrot; i++) CHECK(rb_matmul(be, &d, &w[i], &a)); /* warm-up, scratch */
                    CHECK(rb_backend_sync(be));
                    double t0 = now();
                    for (int i = 0; i < nrot; i++) CHECK(rb_matmul(be, &d, &w[i], &a));
                    CHECK(rb_backend_sync(be));
                    const double est = (now() - t0) / nrot;
                    int n = nrot * (int)(1.5e-3 / (est * nrot) + 1);
                    if (n > 4096) n = nrot * (4096 / nrot);
                    const double te = mvb_time(be, &d, w, nrot, &a, n, false);
                    const double tg = graphs ? mvb_time(be, &d, w, nrot, &a, n, true) : 0;
                    const double ge = (double)wbytes / te / 1e9, gg = tg > 0 ? (double)wbytes / tg / 1e9 : 0;
                    tab[si][di][mi][v] = tg > 0 ? tg : te;
                    printf("{\"bench\":\"q8\",\"path\":\"%s\",\"wtype\":\"%s\",\"K\":%lld,\"N\":%lld,\"M\":%lld,"
                           "\"calls\":%d,\"us\":%.2f,\"weight_GBps\":%.1f,\"ratio\":%.3f,\"graph_us\":%.2f,"
                           "\"graph_GBps\":%.1f,\"graph_ratio\":%.3f,\"TOPs\":%.2f}\n",
                           vname[v], rb_dtype_name(dts[di]), (long long)K, (long long)N, (long long)M, n, te * 1e6, ge,
                           ge / copy_bw, tg * 1e6, gg, gg / copy_bw,
                           2.0 * (double)(K * N * M) / (tg > 0 ? tg : te) / 1e12);
                    fflush(stdout);
                }
                const rb_gpu_tuning dflt = {0};
                (void)rb_gpu_backend_tune(be, &dflt);
                rb_tensor_free(&a);
                rb_tensor_free(&d);
            }
            for (int i = 0; i < nrot; i++) rb_tensor_free(&w[i]);
        }
    printf("\nus a product (graph replay where the backend has graphs), default [before / first / q8 / whole where run]; "
           "copy %.0f GB/s\n| K x N | weights |",
           copy_bw);
    for (int mi = 0; mi < NM; mi++) printf(" M=%lld |", (long long)Ms[mi]);
    printf("\n|---|---|");
    for (int mi = 0; mi < NM; mi++) printf("---|");
    printf("\n");
    for (int si = 0; si < NS; si++)
        for (int di = 0; di < ND; di++) {
            printf("| %lldx%lld | %s |", (long long)shapes[si][0], (long long)shapes[si][1], rb_dtype_name(dts[di]));
            for (int mi = 0; mi < NM; mi++) {
                printf(" %.1f", tab[si][di][mi][0] * 1e6);
                bool first = true;
                for (int v = 1; v < NV; v++) {
                    if (tab[si][di][mi][v] <= 0) continue;
                    printf("%s%s %.1f", first ? " [" : " / ", vname[v], tab[si][di][mi][v] * 1e6);
                    first = false;
                }
                printf("%s |", first ? "" : "]");
            }
            printf("\n");
        }
    return 0;
}

/* the device copy bandwidth: 1 GiB buffer to buffer, bytes read + written */
static double copy_bandwidth(rb_backend *be) {
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
    return copy_bw;
}

static int bench_ops(rb_backend *be) { return bench_matvec(be, copy_bandwidth(be)); }

/* `bench_gpu attn SPEC`: rb_attention on the model's layouts (q an f32
 * [D, Tq, Hq] view of [D, Hq, Tq], f16 KV-cache views [D, Tk, Hkv]), D = 128:
 * causal prefill (Tq = Tk) and one decode query over a cache with its
 * position on the device (q_pos). Each case runs with the automatic kernel
 * choice and, on a GPU backend, with the generic kernel only (the
 * pre-tensor-core one: the GPU tuning's generic_attention), for a
 * before/after comparison. Inputs rotate over copies larger than the L2 in
 * all; the time per call is the median of 15 batches, each a graph replay
 * of n calls where the backend has graphs (no launch gaps), else n eager
 * calls. FLOPs: 2 * 2 * D * Hq * Tq * Tk / 2 (causal prefill), 4 D Hq
 * (pos + 1) (decode); kv_GBps: K and V bytes of the visible keys / time.
 * Then the diffusion networks' shapes (bench_attn_sd). */
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static rb_tensor attn_view(const rb_tensor *base, int64_t D, int64_t T, int64_t H, size_t es) {
    rb_tensor t = *base; /* contiguous [D, H, T] seen as [D, T, H] */
    t.ne[0] = D;
    t.ne[1] = T;
    t.ne[2] = H;
    t.ne[3] = 1;
    t.nb[0] = es;
    t.nb[1] = es * (size_t)(D * H);
    t.nb[2] = es * (size_t)D;
    t.nb[3] = es * (size_t)(D * H * T);
    return t;
}

#define ATT_ROT_MAX 16

typedef struct attn_timing {
    double median, min; /* seconds per call */
    int n;              /* calls per batch */
    bool graph;         /* batches were graph replays */
} attn_timing;

/* Times rb_attention(d, q[i % nrot], k[i % nrot], v[i % nrot], p) as the
 * header above says. */
static attn_timing attn_time(rb_backend *be, rb_tensor *d, rb_tensor *q, rb_tensor *k, rb_tensor *v, int nrot,
                             const rb_attn_params *p) {
    const bool graphs = rb_backend_graphs_supported(be);
    for (int r = 0; r < nrot; r++) CHECK(rb_attention(be, d, &q[r], &k[r], &v[r], p));
    CHECK(rb_backend_sync(be));
    double t0 = now();
    for (int r = 0; r < nrot; r++) CHECK(rb_attention(be, d, &q[r], &k[r], &v[r], p));
    CHECK(rb_backend_sync(be));
    const double t1 = (now() - t0) / nrot;
    int n = (int)(3e-3 / t1);
    if (n < 1) n = 1;
    if (n > 200) n = 200;
    rb_graph *gr = NULL;
    if (graphs) {
        CHECK(rb_backend_capture_begin(be));
        for (int i = 0; i < n; i++) CHECK(rb_attention(be, d, &q[i % nrot], &k[i % nrot], &v[i % nrot], p));
        CHECK(rb_backend_capture_end(be, &gr));
        CHECK(rb_graph_launch(gr));
        CHECK(rb_backend_sync(be));
    }
    double ts[15];
    for (int bi = 0; bi < 15; bi++) {
        t0 = now();
        if (gr) CHECK(rb_graph_launch(gr));
        else
            for (int i = 0; i < n; i++) CHECK(rb_attention(be, d, &q[i % nrot], &k[i % nrot], &v[i % nrot], p));
        CHECK(rb_backend_sync(be));
        ts[bi] = (now() - t0) / n;
    }
    const bool graphed = gr != NULL;
    rb_graph_free(gr);
    qsort(ts, 15, sizeof ts[0], cmp_double);
    const attn_timing tm = {ts[7], ts[0], n, graphed};
    return tm;
}

static void bench_attn_sd(rb_backend *be);

static int bench_attn(rb_backend *be) {
    typedef struct {
        int64_t Tq, Tk, Hq, Hkv;
        int32_t pos; /* decode: q_pos on the device; -1: prefill */
    } acase;
    const acase cases[] = {{512, 512, 32, 32, -1},  {512, 512, 32, 8, -1},   {2048, 2048, 32, 32, -1},
                           {2048, 2048, 32, 8, -1}, {1, 512, 32, 32, 511},   {1, 4096, 32, 32, 4095},
                           {1, 4096, 32, 32, 100},  {1, 4096, 32, 8, 4095},  {1, 4096, 32, 8, 100},
                           {1, 513, 32, 32, 0},     {1, 513, 32, 32, 127},   {1, 513, 32, 8, 127},
                           {1, 513, 32, 32, 400}};
    const char *modes[] = {"auto", "generic"};
    const int64_t D = 128;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const acase *c = &cases[ci];
        const size_t kvbytes = (size_t)(2 * D * c->Hkv * c->Tk) * 2;
        int nrot = (int)(((size_t)128 << 20) / kvbytes + 1);
        if (nrot > ATT_ROT_MAX) nrot = ATT_ROT_MAX;
        rb_tensor qa[ATT_ROT_MAX], ka[ATT_ROT_MAX], va[ATT_ROT_MAX], q[ATT_ROT_MAX], k[ATT_ROT_MAX], v[ATT_ROT_MAX];
        for (int r = 0; r < nrot; r++) {
            qa[r] = random_tensor(be, RB_F32, D * c->Hq, c->Tq);
            ka[r] = random_tensor(be, RB_F16, D * c->Hkv, c->Tk);
            va[r] = random_tensor(be, RB_F16, D * c->Hkv, c->Tk);
            q[r] = attn_view(&qa[r], D, c->Tq, c->Hq, 4);
            k[r] = attn_view(&ka[r], D, c->Tk, c->Hkv, 2);
            v[r] = attn_view(&va[r], D, c->Tk, c->Hkv, 2);
        }
        rb_tensor d, qp;
        const int64_t dne[3] = {D, c->Hq, c->Tq}, pne[1] = {1}; /* q_pos: decode cases have Tq = 1 */
        CHECK(rb_tensor_alloc(be, RB_F32, 3, dne, &d));
        CHECK(rb_tensor_alloc(be, RB_I32, 1, pne, &qp));
        const int32_t pos = c->pos < 0 ? 0 : c->pos;
        CHECK(rb_tensor_set(&qp, &pos, sizeof pos));
        rb_attn_params p = {.scale = 0.08838834764831845f /* 1/sqrt(D) */, .causal = true, .q_pos = c->pos >= 0 ? &qp : NULL};
        const double flops = c->pos < 0 ? 2.0 * 2.0 * (double)(D * c->Hq * c->Tq * c->Tk) / 2.0
                                        : 4.0 * (double)(D * c->Hq) * (double)(c->pos + 1);
        const double kvread = c->pos < 0 ? (double)kvbytes : 4.0 * (double)(D * c->Hkv) * (double)(c->pos + 1);
        for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
            const rb_gpu_tuning tune = {.generic_attention = strcmp(modes[mi], "generic") == 0};
            if (rb_gpu_backend_tune(be, &tune) != RB_OK && tune.generic_attention) continue; /* no GPU: auto only */
            attn_timing tm = attn_time(be, &d, q, k, v, nrot, &p);
            const double t = tm.median;
            printf("{\"bench\":\"attn\",\"kernel\":\"%s\",\"D\":%lld,\"Tq\":%lld,\"Tk\":%lld,\"Hq\":%lld,\"Hkv\":%lld,"
                   "\"pos\":%d,\"graph\":%s,\"n\":%d,\"us\":%.2f,\"us_min\":%.2f,\"TFLOPs\":%.2f,\"kv_GBps\":%.1f}\n",
                   modes[mi], (long long)D, (long long)c->Tq, (long long)c->Tk, (long long)c->Hq, (long long)c->Hkv,
                   (int)c->pos, tm.graph ? "true" : "false", tm.n, t * 1e6, tm.min * 1e6, flops / t / 1e12,
                   kvread / t / 1e9);
            fflush(stdout);
        }
        const rb_gpu_tuning dflt = {0};
        (void)rb_gpu_backend_tune(be, &dflt);
        for (int r = 0; r < nrot; r++) {
            rb_tensor_free(&qa[r]);
            rb_tensor_free(&ka[r]);
            rb_tensor_free(&va[r]);
        }
        rb_tensor_free(&d);
        rb_tensor_free(&qp);
    }
    bench_attn_sd(be);
    return 0;
}

/* The diffusion networks' attention (the second part of `bench_gpu attn`):
 * non-causal, no mask, f16 q, k, v and dst in the networks' layout ([H D,
 * T, B] activations seen as [D, T, H, B]): SD3-medium's joint attention
 * (B 2, 24 heads, 4,429 tokens, D 64), SDXL's (10 heads, 4,096 tokens, D
 * 64; against 77 text tokens), SD1.5's levels (8 heads: 4,096 tokens at D
 * 40, 1,024 at 80, 256 at 160; 4,096 against 77) and a D = 128 shape (24
 * heads, 4,608 tokens, batch 1). Each with the default kernel (att_fa.cuh
 * on CUDA) and att_tc.cuh (the tuning's no_att_fa), side by side; timing as
 * above; FLOPs 4 B H Tq Tk D. */
static void bench_attn_sd(rb_backend *be) {
    typedef struct {
        const char *name;
        int64_t B, H, Tq, Tk, D;
    } scase;
    const scase cases[] = {{"sd3m", 2, 24, 4429, 4429, 64},   {"sdxl", 2, 10, 4096, 4096, 64},
                           {"sdxl-cross", 2, 10, 4096, 77, 64}, {"sd15", 2, 8, 4096, 4096, 40},
                           {"sd15-cross", 2, 8, 4096, 77, 40}, {"sd15-l2", 2, 8, 1024, 1024, 80},
                           {"sd15-l3", 2, 8, 256, 256, 160},   {"d128", 1, 24, 4608, 4608, 128}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const scase *c = &cases[ci];
        const size_t setbytes = (size_t)(c->B * c->H * c->D * (2 * c->Tq + 2 * c->Tk)) * 2;
        int nrot = (int)(((size_t)128 << 20) / setbytes + 1);
        if (nrot > ATT_ROT_MAX) nrot = ATT_ROT_MAX;
        rb_tensor qa[ATT_ROT_MAX], ka[ATT_ROT_MAX], va[ATT_ROT_MAX], q[ATT_ROT_MAX], k[ATT_ROT_MAX], v[ATT_ROT_MAX];
        for (int r = 0; r < nrot; r++) {
            qa[r] = random_tensor(be, RB_F16, c->H * c->D, c->Tq * c->B);
            ka[r] = random_tensor(be, RB_F16, c->H * c->D, c->Tk * c->B);
            va[r] = random_tensor(be, RB_F16, c->H * c->D, c->Tk * c->B);
            q[r] = attn_view(&qa[r], c->D, c->Tq, c->H, 2);
            k[r] = attn_view(&ka[r], c->D, c->Tk, c->H, 2);
            v[r] = attn_view(&va[r], c->D, c->Tk, c->H, 2);
            q[r].ne[3] = c->B; /* batch items follow each other: [H D, T, B] */
            k[r].ne[3] = v[r].ne[3] = c->B;
        }
        rb_tensor d;
        const int64_t dne[4] = {c->D, c->H, c->Tq, c->B};
        CHECK(rb_tensor_alloc(be, RB_F16, 4, dne, &d));
        const rb_attn_params p = {.scale = 1.0f / sqrtf((float)c->D)};
        const double flops = 4.0 * (double)(c->B * c->H) * (double)c->Tq * (double)c->Tk * (double)c->D;
        attn_timing tm[2];
        memset(tm, 0, sizeof tm);
        bool have_tc = false;
        for (int mi = 0; mi < 2; mi++) {
            const rb_gpu_tuning tune = {.no_att_fa = mi == 1};
            if (rb_gpu_backend_tune(be, &tune) != RB_OK && mi == 1) continue; /* no GPU: the default only */
            tm[mi] = attn_time(be, &d, q, k, v, nrot, &p);
            have_tc = mi == 1;
        }
        const rb_gpu_tuning dflt = {0};
        (void)rb_gpu_backend_tune(be, &dflt);
        printf("{\"bench\":\"attn_sd\",\"case\":\"%s\",\"B\":%lld,\"H\":%lld,\"Tq\":%lld,\"Tk\":%lld,\"D\":%lld,"
               "\"graph\":%s,\"fa_us\":%.2f,\"fa_TFLOPs\":%.1f,\"tc_us\":%.2f,\"tc_TFLOPs\":%.1f,\"speedup\":%.2f}\n",
               c->name, (long long)c->B, (long long)c->H, (long long)c->Tq, (long long)c->Tk, (long long)c->D,
               tm[0].graph ? "true" : "false", tm[0].median * 1e6, flops / tm[0].median / 1e12,
               have_tc ? tm[1].median * 1e6 : 0.0, have_tc ? flops / tm[1].median / 1e12 : 0.0,
               have_tc ? tm[1].median / tm[0].median : 0.0);
        fflush(stdout);
        for (int r = 0; r < nrot; r++) {
            rb_tensor_free(&qa[r]);
            rb_tensor_free(&ka[r]);
            rb_tensor_free(&va[r]);
        }
        rb_tensor_free(&d);
    }
}

/* ---- mixture-of-experts expert products, `bench_gpu moe SPEC` ----
 * rb_matmul_id at published MoE shapes (random weights): Qwen3-30B-A3B
 * (H 2048, F 768, 128 experts, 8 a token), Mixtral-8x7B (4096, 14336, 8, 2)
 * and gpt-oss-20b (2880, 2880, 32, 4); the gate (or up) product [H -> F] with
 * one shared row a token and the down product [F -> H] with one row a slot,
 * T = 1, 4, 32, 128 and 512 tokens. Each call's ids come from one of 16 sets
 * of random distinct experts per token (so consecutive calls read other
 * experts, as consecutive layers do); time per call is the median of 20
 * runs of 16 calls (3 at T >= 128), eager and (T <= 32) as a graph replay. GB/s: the bytes
 * of the experts a call selects (distinct ones) / its time. At T >= 128 the
 * default path (path: the expert GEMMs of moe_gemm.cuh where the backend
 * takes them, else mv) is timed beside each path forced through
 * rb_gpu_tuning.moe_gemm (mv_us: the matrix-vector kernels; gemm_us: the
 * GEMMs) and, at T = 512, the GEMMs with experts converted 32 MiB at a time
 * (chunk32_us: the f16 copy may stay in L2). */
#define MOEB_SETS 16
#define MOEB_RUNS 20

static double moeb_time(rb_backend *be, rb_tensor *d, rb_tensor *w, rb_tensor *x, rb_tensor *ids, bool graph,
                        int runs) {
    rb_graph *gr = NULL;
    if (graph) {
        if (rb_backend_capture_begin(be) != RB_OK) return 0;
        rb_status s = RB_OK;
        for (int i = 0; i < MOEB_SETS && s == RB_OK; i++) s = rb_matmul_id(be, d, w, x, &ids[i]);
        const rb_status e = rb_backend_capture_end(be, &gr);
        if (s != RB_OK || e != RB_OK || !gr) {
            fprintf(stderr, "graph capture failed: %s\n", rb_backend_last_error(be));
            rb_graph_free(gr);
            return 0;
        }
    }
    double ts[MOEB_RUNS];
    for (int r = 0; r < runs; r++) {
        const double t0 = now();
        if (gr) CHECK(rb_graph_launch(gr));
        else
            for (int i = 0; i < MOEB_SETS; i++) CHECK(rb_matmul_id(be, d, w, x, &ids[i]));
        CHECK(rb_backend_sync(be));
        ts[r] = (now() - t0) / MOEB_SETS;
    }
    rb_graph_free(gr);
    qsort(ts, (size_t)runs, sizeof ts[0], mvb_cmp);
    return ts[runs / 2];
}

static int bench_moe(rb_backend *be) {
    const struct { const char *name; int64_t H, F, E, k; rb_dtype types[2]; } shapes[] = {
        {"qwen3-30b-a3b", 2048, 768, 128, 8, {RB_Q4_K, RB_Q8_0}},
        {"mixtral-8x7b", 4096, 14336, 8, 2, {RB_Q4_K, RB_Q8_0}},
        {"gpt-oss-20b", 2880, 2880, 32, 4, {RB_MXFP4, RB_Q8_0}},
    };
    const int64_t Ts[] = {1, 4, 32, 128, 512};
    const bool graphs = rb_backend_graphs_supported(be);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ti = 0; ti < 2; ti++)
            for (int part = 0; part < 2; part++) { /* 0: gate [H -> F], 1: down [F -> H] */
                const rb_dtype dt = shapes[si].types[ti];
                const int64_t E = shapes[si].E, k = shapes[si].k;
                const int64_t K = part ? shapes[si].F : shapes[si].H, N = part ? shapes[si].H : shapes[si].F;
                const size_t ebytes = rb_dtype_row_size(dt, K) * (size_t)N;
                /* the experts: one random expert's bytes copied to all */
                rb_tensor one = mvb_weights(be, dt, K, N), w;
                const int64_t wne[3] = {K, N, E};
                CHECK(rb_tensor_alloc(be, dt, 3, wne, &w));
                for (int64_t e = 0; e < E; e++) CHECK(rb_buffer_copy(w.buf, (size_t)e * ebytes, one.buf, 0, ebytes));
                CHECK(rb_buffer_set_constant(w.buf));
                rb_tensor_free(&one);
                for (size_t tj = 0; tj < sizeof Ts / sizeof Ts[0]; tj++) {
                    const int64_t T = Ts[tj], S = part ? k : 1;
                    rb_tensor x = random_tensor(be, RB_F32, K, S * T), d, ids[MOEB_SETS];
                    x.ne[1] = S;
                    x.ne[2] = T;
                    x.nb[2] = x.nb[1] * (size_t)S;
                    x.nb[3] = x.nb[2] * (size_t)T;
                    const int64_t dne[3] = {N, k, T}, ine[2] = {k, T};
                    CHECK(rb_tensor_alloc(be, RB_F32, 3, dne, &d));
                    double distinct = 0;
                    int32_t *iv = malloc(sizeof(int32_t) * (size_t)(k * T));
                    bool *used = malloc((size_t)E);
                    if (!iv || !used) exit(1);
                    for (int i = 0; i < MOEB_SETS; i++) {
                        memset(used, 0, (size_t)E);
                        for (int64_t t = 0; t < T; t++)
                            for (int64_t j = 0; j < k; j++) {
                                int32_t e;
                                bool dup;
                                do {
                                    e = (int32_t)((frand() * 0.5f + 0.5f) * (float)E) % (int32_t)E;
                                    dup = false;
                                    for (int64_t q = 0; q < j; q++) dup |= iv[t * k + q] == e;
                                } while (dup);
                                iv[t * k + j] = e;
                                if (!used[e]) distinct += 1.0 / MOEB_SETS;
                                used[e] = true;
                            }
                        CHECK(rb_tensor_alloc(be, RB_I32, 2, ine, &ids[i]));
                        CHECK(rb_tensor_set(&ids[i], iv, sizeof(int32_t) * (size_t)(k * T)));
                    }
                    CHECK(rb_matmul_id(be, &d, &w, &x, &ids[0])); /* warm-up: sizes the scratch */
                    CHECK(rb_backend_sync(be));
                    rb_gpu_conv_stats st0, st1;
                    const bool stats = rb_gpu_backend_conv_stats(be, &st0) == RB_OK;
                    const double te = moeb_time(be, &d, &w, &x, ids, false, T <= 32 ? MOEB_RUNS : 3);
                    const bool gemm = stats && rb_gpu_backend_conv_stats(be, &st1) == RB_OK &&
                                      st1.moe_gemm_calls > st0.moe_gemm_calls;
                    const double tg = graphs && T <= 32 ? moeb_time(be, &d, &w, &x, ids, true, MOEB_RUNS) : 0;
                    /* each path forced: the matrix-vector kernels, the GEMMs, the GEMMs in 32 MiB chunks */
                    const rb_gpu_tuning alt[3] = {{.moe_gemm = -1}, {.moe_gemm = 1}, {.moe_gemm = 1, .moe_gemm_chunk_mib = 32}};
                    const rb_gpu_tuning dflt = {0};
                    double ta[3] = {0, 0, 0};
                    for (int p = 0; p < 3 && T >= 128; p++) {
                        if ((p == 2 && T != 512) || rb_gpu_backend_tune(be, &alt[p]) != RB_OK) continue;
                        CHECK(rb_matmul_id(be, &d, &w, &x, &ids[0])); /* sizes the scratch */
                        ta[p] = moeb_time(be, &d, &w, &x, ids, false, 3);
                        CHECK(rb_gpu_backend_tune(be, &dflt));
                    }
                    const double tmv = ta[0], tgm = ta[1], tch = ta[2];
                    const double gb = distinct * (double)ebytes / 1e9, flop = 2.0 * (double)(K * N * k * T);
                    printf("{\"bench\":\"matmul_id\",\"shape\":\"%s\",\"part\":\"%s\",\"wtype\":\"%s\",\"K\":%lld,"
                           "\"N\":%lld,\"E\":%lld,\"k\":%lld,\"T\":%lld,\"experts_read\":%.1f,\"path\":\"%s\",\"us\":%.2f,"
                           "\"GBps\":%.1f,\"graph_us\":%.2f,\"graph_GBps\":%.1f,\"TFLOPs\":%.3f,\"mv_us\":%.2f,"
                           "\"mv_TFLOPs\":%.3f,\"gemm_us\":%.2f,\"gemm_TFLOPs\":%.3f,\"chunk32_us\":%.2f}\n",
                           shapes[si].name, part ? "down" : "gate", rb_dtype_name(dt), (long long)K, (long long)N,
                           (long long)E, (long long)k, (long long)T, distinct, gemm ? "gemm" : "mv", te * 1e6, gb / te,
                           tg * 1e6, tg > 0 ? gb / tg : 0, flop / te / 1e12, tmv * 1e6, tmv > 0 ? flop / tmv / 1e12 : 0,
                           tgm * 1e6, tgm > 0 ? flop / tgm / 1e12 : 0, tch * 1e6);
                    fflush(stdout);
                    free(iv);
                    free(used);
                    for (int i = 0; i < MOEB_SETS; i++) rb_tensor_free(&ids[i]);
                    rb_tensor_free(&x);
                    rb_tensor_free(&d);
                }
                rb_tensor_free(&w);
            }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_gpu ops SPEC | bench_gpu q8 SPEC | bench_gpu attn SPEC | bench_gpu moe SPEC\n");
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
    else if (strcmp(argv[1], "q8") == 0) rc = bench_q8(be, copy_bandwidth(be));
    else if (strcmp(argv[1], "attn") == 0) rc = bench_attn(be);
    else if (strcmp(argv[1], "moe") == 0) rc = bench_moe(be);
    rb_backend_destroy(be);
    return rc;
}
