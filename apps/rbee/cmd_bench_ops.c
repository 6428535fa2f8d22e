/* `rbee bench-ops`: measures this machine's memory bandwidth (read stream and
 * copy over buffers much larger than the LLC, 1 thread and all threads) and
 * the CPU backend's matvec / matmul (f32, f16, q8_0, q4_0 and k-quant weights),
 * softmax and rms_norm, each beside its theoretical peak: the bandwidth
 * roofline for memory-bound ops, the FMA peak for matmul. Real random data,
 * a warm-up run, then the median of several timed repeats. */
#include "commands.h"
#include "rbee/backend.h"
#include "rbee/ops.h"
#include "rbee/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_opts {
    bool json, quick;
    int threads; /* all-thread count */
    const char *isa;
    const char *types; /* comma-separated weight dtypes, NULL = all */
} bench_opts;

typedef struct bench_row {
    char op[24], dtype[8];
    int threads;
    int64_t m;
    double sec, gflops, gbs, peak, ratio, ratio_bw1; /* peak in GFLOP/s (matmul) or GB/s */
    const char *peak_kind;
} bench_row;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- memory bandwidth (plain threads; independent of the backend) ---- */

typedef struct bw_task {
    const uint64_t *src;
    uint64_t *dst; /* NULL: read only */
    size_t n;      /* uint64 words */
    uint64_t sink;
} bw_task;

static void *bw_worker(void *arg) {
    bw_task *t = arg;
    if (t->dst) {
        memcpy(t->dst, t->src, t->n * 8);
        t->sink = t->dst[t->n / 2];
    } else {
        /* 8 streams read in lockstep with software prefetch (like a matvec over
         * 8 rows): one plain sequential stream engages too few prefetchers to
         * show the bandwidth a kernel can actually get */
        enum { S = 8 };
        const size_t seg = t->n / S;
        uint64_t acc[S] = {0};
        for (size_t i = 0; i + 4 <= seg; i += 4)
            for (int k = 0; k < S; k++) {
                const uint64_t *p = t->src + (size_t)k * seg + i;
                __builtin_prefetch(p + 128); /* 1 KiB ahead, as the matvec kernels do */
                acc[k] += p[0] + p[1] + p[2] + p[3];
            }
        for (size_t i = seg * S; i < t->n; i++) acc[0] += t->src[i];
        uint64_t x = 0;
        for (int k = 0; k < S; k++) x ^= acc[k];
        t->sink = x;
    }
    return NULL;
}

/* GB/s of one pass over n words with nth threads (bytes moved = read (+ write)) */
static double bw_pass(const uint64_t *src, uint64_t *dst, size_t n, int nth) {
    pthread_t tid[64];
    bw_task tasks[64];
    if (nth > 64) nth = 64;
    double t0 = now_s();
    for (int i = 0; i < nth; i++) {
        size_t lo = n * (size_t)i / (size_t)nth, hi = n * (size_t)(i + 1) / (size_t)nth;
        tasks[i] = (bw_task){src + lo, dst ? dst + lo : NULL, hi - lo, 0};
        if (i > 0 && pthread_create(&tid[i], NULL, bw_worker, &tasks[i]) != 0) return -1;
    }
    bw_worker(&tasks[0]);
    for (int i = 1; i < nth; i++) pthread_join(tid[i], NULL);
    double dt = now_s() - t0;
    return (double)n * 8.0 * (dst ? 2.0 : 1.0) / dt / 1e9;
}

static double bw_measure(const uint64_t *src, uint64_t *dst, size_t n, int nth, int reps) {
    double v[16];
    bw_pass(src, dst, n, nth); /* warm-up */
    for (int r = 0; r < reps; r++) v[r] = bw_pass(src, dst, n, nth);
    return median(v, reps);
}

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill_random(float *x, size_t n, uint64_t *s, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * ((float)(rng_next(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

static rb_backend *make_backend(int threads, const char *isa) {
    rb_backend_config cfg = {.n_threads = threads, .cpu_isa = isa};
    rb_backend *be = NULL;
    rb_error err;
    if (rb_backend_create("cpu", &cfg, &be, &err) != RB_OK) {
        fprintf(stderr, "bench-ops: %s\n", err.msg);
        return NULL;
    }
    return be;
}

static double cpu_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    double mhz = 0;
    if (!f) return 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0) {
            const char *c = strchr(line, ':');
            if (c) mhz = atof(c + 1);
            break;
        }
    fclose(f);
    return mhz;
}

/* Builds a K x N weight tensor of dtype t from n_distinct random rows repeated
 * (quantizing all rows of a big matrix with the reference k-quant search is
 * slow; repetition does not help caches since every row has its own address). */
static rb_status make_weights(rb_backend *be, rb_dtype t, int64_t K, int64_t N, rb_tensor *w, uint64_t *seed) {
    const int64_t distinct = 64;
    float *src = malloc(sizeof(float) * (size_t)(K * distinct));
    size_t rs = rb_dtype_row_size(t, K);
    char *q = malloc(rs * (size_t)distinct);
    if (!src || !q) {
        free(src);
        free(q);
        return RB_E_NOMEM;
    }
    fill_random(src, (size_t)(K * distinct), seed, 0.05f);
    rb_status st = rb_quantize_rows(t, src, q, distinct, K);
    int64_t ne[2] = {K, N};
    if (st == RB_OK) st = rb_tensor_alloc(be, t, 2, ne, w);
    if (st == RB_OK) {
        char *dst = rb_buffer_host_ptr(w->buf);
        if (!dst) st = RB_E_UNSUPPORTED;
        for (int64_t r = 0; st == RB_OK && r < N; r++)
            memcpy(dst + w->offs + (size_t)r * rs, q + (size_t)(r % distinct) * rs, rs);
    }
    free(src);
    free(q);
    return st;
}

/* median seconds of rb_matmul(dst = w x act) */
static double time_matmul(rb_backend *be, rb_tensor *d, rb_tensor *w, rb_tensor *act, int reps) {
    double v[16];
    if (rb_matmul(be, d, w, act) != RB_OK || rb_backend_sync(be) != RB_OK) return -1;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        rb_matmul(be, d, w, act);
        rb_backend_sync(be);
        v[r] = now_s() - t0;
    }
    return median(v, reps);
}

static void print_row_human(const bench_row *r) {
    if (strcmp(r->peak_kind, "bw") == 0)
        printf("%-10s %-5s %5lld %3d  %9.3f ms %8.1f GFLOP/s %7.2f GB/s | roofline %6.2f GB/s  %5.1f%% (%5.1f%% of 1-thread bw)\n",
               r->op, r->dtype, (long long)r->m, r->threads, r->sec * 1e3, r->gflops, r->gbs, r->peak,
               100 * r->ratio, 100 * r->ratio_bw1);
    else
        printf("%-10s %-5s %5lld %3d  %9.3f ms %8.1f GFLOP/s %7.2f GB/s | FMA peak %6.0f GFLOP/s %5.1f%%\n", r->op,
               r->dtype, (long long)r->m, r->threads, r->sec * 1e3, r->gflops, r->gbs, r->peak, 100 * r->ratio);
}

static void print_row_json(const bench_row *r, bool first) {
    printf("%s\n    {\"op\": \"%s\", \"dtype\": \"%s\", \"m\": %lld, \"threads\": %d, \"seconds\": %.6g, "
           "\"gflops\": %.4g, \"gbs\": %.4g, \"peak_kind\": \"%s\", \"peak\": %.4g, \"ratio\": %.4f, "
           "\"ratio_bw_1thread\": %.4f}",
           first ? "" : ",", r->op, r->dtype, (long long)r->m, r->threads, r->sec, r->gflops, r->gbs, r->peak_kind,
           r->peak, r->ratio, r->ratio_bw1);
}

/* whether name is one of the comma-separated entries of list (case-insensitive) */
static bool type_listed(const char *list, const char *name) {
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && strncasecmp(p, name, len) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static int usage(FILE *f) {
    fprintf(f, "usage: rbee bench-ops [--json] [--quick] [--threads N] [--isa auto|scalar|avx2|avx512]\n"
               "                      [--types LIST]\n\n"
               "Measures memory bandwidth, then matvec/matmul (f32, f16, q8_0, q4_0, q4_K, q5_K, q6_K; M = 1 and\n"
               "64) on a 4096 x 14336 weight matrix (larger than the LLC), softmax and rms_norm, for 1 thread and\n"
               "all threads, each beside its theoretical peak. --types q4_K,q6_K keeps only those weight types.\n");
    return f == stdout ? 0 : 2;
}

int rb_cmd_bench_ops(int argc, char **argv) {
    bench_opts o = {false, false, (int)sysconf(_SC_NPROCESSORS_ONLN), "auto", NULL};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) o.json = true;
        else if (strcmp(argv[i], "--quick") == 0) o.quick = true;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) o.threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) o.isa = argv[++i];
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc) o.types = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return usage(stdout);
        else {
            fprintf(stderr, "bench-ops: unknown option '%s'\n", argv[i]);
            return usage(stderr);
        }
    }
    if (o.threads < 1 || o.threads > 64) {
        fprintf(stderr, "bench-ops: --threads must be 1..64\n");
        return 2;
    }
    const int reps = o.quick ? 3 : 7;
    const int64_t K = 4096, N = 14336, M_BIG = 64;
    int thread_counts[2] = {1, o.threads};
    int n_tc = o.threads > 1 ? 2 : 1;

    /* memory bandwidth */
    size_t bw_bytes = (size_t)(o.quick ? 256 : 1024) << 20;
    uint64_t *src = malloc(bw_bytes), *dst = malloc(bw_bytes);
    if (!src || !dst) {
        fprintf(stderr, "bench-ops: cannot allocate %zu MiB for the bandwidth test\n", bw_bytes >> 20);
        free(src);
        free(dst);
        return 1;
    }
    for (size_t i = 0; i < bw_bytes / 8; i++) src[i] = i * 0x9e3779b97f4a7c15ull, dst[i] = 0;
    double bw_read[2], bw_copy[2];
    for (int t = 0; t < n_tc; t++) {
        bw_read[t] = bw_measure(src, NULL, bw_bytes / 8, thread_counts[t], reps);
        bw_copy[t] = bw_measure(src, dst, bw_bytes / 8, thread_counts[t], reps);
    }
    if (n_tc == 1) bw_read[1] = bw_read[0], bw_copy[1] = bw_copy[0];
    free(src);
    free(dst);

    rb_backend *probe = make_backend(1, o.isa);
    if (!probe) return 1;
    rb_device_info info;
    rb_backend_device_info(probe, &info);
    rb_backend_destroy(probe);
    const double mhz = cpu_mhz();
    const bool avx512 = strstr(info.name, "avx512") != NULL, avx2 = strstr(info.name, "avx2") != NULL;
    const int lanes = avx512 ? 16 : avx2 ? 8 : 1;
    const int fma_units = 2;
    double fma_peak_1 = mhz * 1e-3 * 2.0 * lanes * fma_units; /* GFLOP/s of one core */

    if (o.json) {
        printf("{\n  \"cpu\": \"%s\",\n  \"threads\": %d,\n  \"mhz\": %.0f,\n", info.name, o.threads, mhz);
        printf("  \"assumptions\": \"FMA peak = threads x %.0f MHz x 2 flop x %d f32 lanes x %d FMA units\",\n", mhz,
               lanes, fma_units);
        printf("  \"bandwidth\": {\"read_1thread_gbs\": %.3f, \"read_all_gbs\": %.3f, \"copy_1thread_gbs\": %.3f, "
               "\"copy_all_gbs\": %.3f, \"buffer_mib\": %zu},\n  \"results\": [",
               bw_read[0], bw_read[1], bw_copy[0], bw_copy[1], bw_bytes >> 20);
    } else {
        printf("cpu: %s, %d threads, %.0f MHz\n", info.name, o.threads, mhz);
        printf("memory bandwidth (%zu MiB buffers): read %.2f GB/s (1 thread), %.2f GB/s (%d threads); "
               "copy %.2f / %.2f GB/s (read+write bytes)\n",
               bw_bytes >> 20, bw_read[0], bw_read[1], o.threads, bw_copy[0], bw_copy[1]);
        printf("peaks: matvec roofline = all-thread read bandwidth; matmul FMA peak = threads x %.0f MHz x 2 x %d "
               "lanes x %d FMA units (f32; int8 VNNI work is counted as the same flops)\n\n",
               mhz, lanes, fma_units);
        printf("%-10s %-5s %5s %3s  %12s %16s %12s\n", "op", "dtype", "M", "thr", "time", "compute", "weights");
    }

    bool first = true;
    int rc = 0;
    const rb_dtype wtypes[] = {RB_F32, RB_F16, RB_Q8_0, RB_Q4_0, RB_Q4_K, RB_Q5_K, RB_Q6_K};
    uint64_t seed = 0x1234567;
    for (int t = 0; t < n_tc && rc == 0; t++) {
        rb_backend *be = make_backend(thread_counts[t], o.isa);
        if (!be) return 1;
        for (size_t wi = 0; wi < sizeof wtypes / sizeof wtypes[0] && rc == 0; wi++) {
            if (o.types && !type_listed(o.types, rb_dtype_name(wtypes[wi]))) continue;
            rb_tensor w, act, d;
            if (make_weights(be, wtypes[wi], K, N, &w, &seed) != RB_OK) {
                fprintf(stderr, "bench-ops: cannot build %s weights\n", rb_dtype_name(wtypes[wi]));
                rc = 1;
                break;
            }
            const double wbytes = (double)rb_dtype_row_size(wtypes[wi], K) * (double)N;
            const int64_t ms[2] = {1, M_BIG};
            for (int mi = 0; mi < 2; mi++) {
                int64_t M = ms[mi];
                int64_t ne_b[2] = {K, M}, ne_d[2] = {N, M};
                float *host = malloc(sizeof(float) * (size_t)(K * M));
                if (!host || rb_tensor_alloc(be, RB_F32, 2, ne_b, &act) != RB_OK) {
                    free(host);
                    rc = 1;
                    break;
                }
                fill_random(host, (size_t)(K * M), &seed, 1.0f);
                rb_tensor_set(&act, host, sizeof(float) * (size_t)(K * M));
                free(host);
                if (rb_tensor_alloc(be, RB_F32, 2, ne_d, &d) != RB_OK) {
                    rb_tensor_free(&act);
                    rc = 1;
                    break;
                }
                double sec = time_matmul(be, &d, &w, &act, reps);
                if (sec <= 0) {
                    fprintf(stderr, "bench-ops: matmul failed: %s\n", rb_backend_last_error(be));
                    rc = 1;
                }
                bench_row r = {{0}, {0}, thread_counts[t], M, sec, 0, 0, 0, 0, 0, "bw"};
                snprintf(r.op, sizeof r.op, "%s", M == 1 ? "matvec" : "matmul");
                snprintf(r.dtype, sizeof r.dtype, "%s", rb_dtype_name(wtypes[wi]));
                r.gflops = 2.0 * (double)K * (double)N * (double)M / sec / 1e9;
                r.gbs = wbytes / sec / 1e9;
                if (M == 1) {
                    r.peak = bw_read[1];
                    r.ratio = r.gbs / bw_read[1];
                    r.ratio_bw1 = r.gbs / bw_read[0];
                } else {
                    r.peak_kind = "fma";
                    r.peak = fma_peak_1 * thread_counts[t];
                    r.ratio = r.gflops / r.peak;
                    r.ratio_bw1 = r.gbs / bw_read[0];
                }
                if (rc == 0) {
                    if (o.json) print_row_json(&r, first);
                    else print_row_human(&r);
                    first = false;
                }
                rb_tensor_free(&act);
                rb_tensor_free(&d);
                if (rc) break;
            }
            rb_tensor_free(&w);
        }
        /* softmax and rms_norm over a 4096 x 4096 f32 tensor (64 MiB in, 64 MiB out) */
        for (int op = 0; op < 2 && rc == 0; op++) {
            rb_tensor x, y;
            int64_t ne[2] = {4096, 4096};
            if (rb_tensor_alloc(be, RB_F32, 2, ne, &x) != RB_OK || rb_tensor_alloc(be, RB_F32, 2, ne, &y) != RB_OK) {
                rc = 1;
                break;
            }
            float *h = malloc(sizeof(float) * 4096 * 4096);
            if (!h) { rc = 1; break; }
            fill_random(h, 4096u * 4096u, &seed, 4.0f);
            rb_tensor_set(&x, h, sizeof(float) * 4096 * 4096);
            free(h);
            double v[16];
            for (int rr = -1; rr < reps; rr++) {
                double t0 = now_s();
                rb_status st = op == 0 ? rb_softmax(be, &y, &x, NULL, 1.0f) : rb_rms_norm(be, &y, &x, NULL, 1e-6f);
                rb_backend_sync(be);
                if (st != RB_OK) {
                    fprintf(stderr, "bench-ops: %s failed: %s\n", op ? "rms_norm" : "softmax",
                            rb_backend_last_error(be));
                    rc = 1;
                    break;
                }
                if (rr >= 0) v[rr] = now_s() - t0;
            }
            if (rc == 0) {
                double sec = median(v, reps);
                bench_row r = {{0}, "f32", thread_counts[t], 4096, sec, 0, 0, bw_copy[1], 0, 0, "bw"};
                snprintf(r.op, sizeof r.op, "%s", op == 0 ? "softmax" : "rms_norm");
                r.gbs = 2.0 * 4096.0 * 4096.0 * 4.0 / sec / 1e9;
                r.ratio = r.gbs / bw_copy[1];
                r.ratio_bw1 = r.gbs / bw_copy[0];
                if (o.json) print_row_json(&r, first);
                else print_row_human(&r);
                first = false;
            }
            rb_tensor_free(&x);
            rb_tensor_free(&y);
        }
        rb_backend_destroy(be);
    }
    if (o.json) printf("\n  ]\n}\n");
    else printf("\n(softmax/rms_norm: GB/s = read + write bytes; roofline = copy bandwidth)\n");
    return rc;
}
