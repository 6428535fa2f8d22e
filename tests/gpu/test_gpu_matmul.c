/* rb_matmul on the GPU against a double-precision reference computed from
 * the dequantized weights and the stored activations, for weights in f32,
 * f16, bf16, q4_0, q8_0, q4_K and q6_K; M = 1, 3, 8, 19 (matrix-vector
 * kernels, 8 rows per pass) and 70 (GEMM path); odd N and K; a's dims 2/3 broadcast over b's;
 * permuted/sliced activations of f32/f16/bf16; f32 and f16 destinations in
 * strided views. Run twice: with the default GEMM (cuBLAS on CUDA) and with
 * RBEE_GPU_GEMM=tiled (the own kernel HIP uses). Bounds (relative L2 error):
 * matrix-vector 1e-5 (activations stay f32); GEMM in f32 1e-5, in f16 2e-3,
 * in bf16 1e-2; an f16 destination adds 1e-3. Skips without a GPU. */
#include "gpu_pair.h"

#include "rbee/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values of the view of side 0 (the CPU copy) as double; for quantized
 * weights, dequantized with the reference decoder. */
static double *values(const gp *x) {
    const rb_tensor *t = &x->c;
    if (!rb_dtype_info((int)t->dtype)->is_quant) return gp_read(x, 0);
    const int64_t n = rb_tensor_nelements(t), K = t->ne[0];
    double *v = malloc(sizeof(double) * (size_t)n);
    float *row = malloc(sizeof(float) * (size_t)K);
    assert_non_null(v);
    assert_non_null(row);
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                TU_OK(rb_dequantize_row(t->dtype, x->orig + t->offs + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3],
                                        row, K));
                for (int64_t i0 = 0; i0 < K; i0++) v[k++] = row[i0];
            }
    free(row);
    return v;
}

static void run_all(bool tiled) {
    if (tiled) setenv("RBEE_GPU_GEMM", "tiled", 1);
    else unsetenv("RBEE_GPU_GEMM");
    rb_backend *g = gp_gpu();
    unsetenv("RBEE_GPU_GEMM");
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, tiled ? 501 : 500);
    const rb_dtype ws[] = {RB_F32, RB_F16, RB_BF16, RB_Q4_0, RB_Q8_0, RB_Q4_K, RB_Q6_K};
    const int64_t Ms[] = {1, 3, 8, 19, 70};
    for (size_t wi = 0; wi < sizeof ws / sizeof ws[0]; wi++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const bool quant = rb_dtype_info((int)ws[wi])->is_quant;
            const int64_t K = quant ? 512 : (mi % 2 ? 333 : 512), N = 37, M = Ms[mi];
            const int64_t A2 = 2, B2 = mi == 4 ? 2 : 4, B3 = 1;
            const int64_t ane[4] = {K, N, A2, 1}, bne[4] = {K, M, B2, B3}, dne[4] = {N, M, B2, B3};
            const rb_dtype bd = mi % 3 == 0 ? RB_F32 : mi % 3 == 1 ? RB_F16 : RB_BF16;
            const rb_dtype dd = (wi + mi) % 4 == 3 ? RB_F16 : RB_F32;
            gp a = gp_make(c, g, &rng, ws[wi], ane, quant || mi % 2 ? GP_SLICE : GP_CONTIG, -1, 1);
            gp b = gp_make(c, g, &rng, bd, bne, mi % 2 ? GP_PERM : GP_SLICE, -1, 1);
            gp d = gp_make(c, g, &rng, dd, dne, mi % 2 ? GP_SLICE : GP_CONTIG, -9, 9);
            TU_OK(rb_matmul(g, &d.g, &a.g, &b.g));
            double *av = values(&a), *bv = gp_read(&b, 0), *got = gp_read(&d, 1);
            double *ref = malloc(sizeof(double) * (size_t)(N * M * B2 * B3));
            float *gotf = malloc(sizeof(float) * (size_t)(N * M * B2 * B3));
            assert_non_null(ref);
            assert_non_null(gotf);
            for (int64_t i2 = 0; i2 < B2; i2++)
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        const double *ar = av + ((i2 / (B2 / A2)) * N + n) * K, *br = bv + (i2 * M + m) * K;
                        double s = 0;
                        for (int64_t k = 0; k < K; k++) s += ar[k] * br[k];
                        ref[(i2 * M + m) * N + n] = s;
                    }
            const int64_t n_out = N * M * B2 * B3;
            for (int64_t i = 0; i < n_out; i++) gotf[i] = (float)got[i];
            const double err = tu_rel_l2(gotf, ref, (size_t)n_out);
            double bound = 1e-5;
            if (M > 32) {
                const bool f32 = ws[wi] == RB_F32 || (tiled && ws[wi] == RB_BF16);
                bound = f32 ? 1e-5 : ws[wi] == RB_BF16 ? 1e-2 : 2e-3;
            }
            if (dd == RB_F16) bound += 1e-3;
            print_message("%s a=%-5s b=%-4s d=%-3s M=%-3lld K=%-3lld rel L2 %.2e (bound %.0e)\n",
                          tiled ? "tiled " : "default", rb_dtype_name(ws[wi]), rb_dtype_name(bd), rb_dtype_name(dd),
                          (long long)M, (long long)K, err, bound);
            if (!(err <= bound))
                fail_msg("matmul %s x %s M=%lld: rel L2 %.3g > %.1g", rb_dtype_name(ws[wi]), rb_dtype_name(bd),
                         (long long)M, err, bound);
            /* nothing outside dst written: compare the GPU parent against its original */
            {
                unsigned char *p = malloc(d.size);
                assert_non_null(p);
                TU_OK(rb_buffer_get(d.gb, 0, p, d.size));
                const size_t es = rb_dtype_info((int)dd)->type_size;
                for (int64_t i3 = 0; i3 < B3; i3++)
                    for (int64_t i2 = 0; i2 < B2; i2++)
                        for (int64_t m = 0; m < M; m++)
                            for (int64_t n = 0; n < N; n++)
                                memcpy(p + d.g.offs + n * d.g.nb[0] + m * d.g.nb[1] + i2 * d.g.nb[2] + i3 * d.g.nb[3],
                                       d.orig + d.g.offs + n * d.g.nb[0] + m * d.g.nb[1] + i2 * d.g.nb[2] +
                                           i3 * d.g.nb[3],
                                       es);
                assert_memory_equal(p, d.orig, d.size);
                free(p);
            }
            free(av);
            free(bv);
            free(got);
            free(ref);
            free(gotf);
            gp_free(&a);
            gp_free(&b);
            gp_free(&d);
        }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

static void test_matmul_default(void **state) {
    (void)state;
    run_all(false);
}

static void test_matmul_tiled(void **state) {
    (void)state;
    run_all(true);
}

/* A decode-sized product big enough to exercise grid-stride loops and many
 * warps per row: 4096 x 1000 q4_K and bf16 weights, M = 1 and 2. */
static void test_matmul_large(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 600);
    const rb_dtype ws[] = {RB_Q4_K, RB_BF16, RB_Q8_0};
    for (int wi = 0; wi < 3; wi++)
        for (int64_t M = 1; M <= 2; M++) {
            const int64_t K = 4096, N = 1000;
            const int64_t ane[4] = {K, N, 1, 1}, bne[4] = {K, M, 1, 1}, dne[4] = {N, M, 1, 1};
            gp a = gp_make(c, g, &rng, ws[wi], ane, GP_CONTIG, -1, 1);
            gp b = gp_make(c, g, &rng, RB_F32, bne, GP_CONTIG, -1, 1);
            gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, 0, 1);
            TU_OK(rb_matmul(g, &d.g, &a.g, &b.g));
            double *av = values(&a), *bv = gp_read(&b, 0), *got = gp_read(&d, 1);
            double *ref = malloc(sizeof(double) * (size_t)(N * M));
            float *gf = malloc(sizeof(float) * (size_t)(N * M));
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++) s += av[n * K + k] * bv[m * K + k];
                    ref[m * N + n] = s;
                    gf[m * N + n] = (float)got[m * N + n];
                }
            const double err = tu_rel_l2(gf, ref, (size_t)(N * M));
            print_message("large %s M=%lld rel L2 %.2e\n", rb_dtype_name(ws[wi]), (long long)M, err);
            assert_true(err < 1e-5);
            free(av);
            free(bv);
            free(got);
            free(ref);
            free(gf);
            gp_free(&a);
            gp_free(&b);
            gp_free(&d);
        }
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_default),
        cmocka_unit_test(test_matmul_tiled),
        cmocka_unit_test(test_matmul_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
