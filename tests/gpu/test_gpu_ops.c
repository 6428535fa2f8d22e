/* Every non-matmul, non-attention op on the GPU against the CPU backend on
 * the same seeded random tensors (odd shapes; contiguous, permuted and sliced
 * layouts; f32/f16/bf16): fill, affine, all unary and binary ops with
 * broadcasting, where, cast (float <-> float strided and in 4-wide rows,
 * quantized -> float; the iq formats bit for bit),
 * get_rows (float, q4_0/q8_0/q4_K/q5_K/q6_K and iq4/iq3/iq2/iq1 tables, bad ids), set_rows,
 * rms_norm, layer_norm, softmax with masks, reductions, rope, and the fused
 * rb_glu / rb_add_rms_norm (1e-6 relative to the CPU). f32 results
 * within 1e-5 relative (plus a tiny absolute floor); f16/bf16 outputs allow
 * one rounding step more. Skips without a GPU. */
#include "gpu_pair.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct env {
    rb_backend *c, *g;
    tu_rng rng;
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->g = gp_gpu();
    e->c = e->g ? gp_cpu() : NULL;
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    rb_backend_destroy(e->g);
    rb_backend_destroy(e->c);
    free(e);
    return 0;
}

#define PREP(seed)                                                                                             \
    env *e = *state;                                                                                           \
    GP_NEED_GPU(e->g);                                                                                         \
    tu_rng_seed(&e->rng, seed)

#define MK(dt, ne, lay, lo, hi) gp_make(e->c, e->g, &e->rng, dt, ne, lay, lo, hi)

static const int64_t SH[4] = {37, 11, 3, 2};

static void test_fill_affine_unary(void **state) {
    PREP(11);
    const rb_dtype dts[] = {RB_F32, RB_F16, RB_BF16, RB_I32};
    for (int i = 0; i < 4; i++) {
        gp d = MK(dts[i], SH, GP_SLICE, -3, 3);
        TU_OK(rb_fill(e->c, &d.c, -1.75f));
        TU_OK(rb_fill(e->g, &d.g, -1.75f));
        gp_expect_close(&d, 0, 0, "fill");
        gp_free(&d);
    }
    const struct { rb_dtype s, d; gp_layout ls, ld; } cs[] = {
        {RB_F32, RB_F32, GP_PERM, GP_SLICE}, {RB_F16, RB_BF16, GP_CONTIG, GP_PERM}, {RB_BF16, RB_F32, GP_SLICE, GP_CONTIG}};
    for (size_t k = 0; k < 3; k++) {
        gp s = MK(cs[k].s, SH, cs[k].ls, -4, 4), d = MK(cs[k].d, SH, cs[k].ld, -1, 1);
        TU_OK(rb_affine(e->c, &d.c, &s.c, 0.37f, -1.25f));
        TU_OK(rb_affine(e->g, &d.g, &s.g, 0.37f, -1.25f));
        gp_expect_close(&d, gp_tol(cs[k].d, 1e-5), 1e-6, "affine");
        for (int op = 0; op < RB_UNARY_COUNT_; op++) {
            const bool pos = op == RB_UNARY_SQRT || op == RB_UNARY_RSQRT || op == RB_UNARY_LOG || op == RB_UNARY_RECIP;
            gp s2 = MK(cs[k].s, SH, cs[k].ls, pos ? 0.1f : -5.0f, pos ? 4.0f : 5.0f);
            TU_OK(rb_unary(e->c, (rb_unary_op)op, &d.c, &s2.c));
            TU_OK(rb_unary(e->g, (rb_unary_op)op, &d.g, &s2.g));
            char what[64];
            snprintf(what, sizeof what, "unary %d %s->%s", op, rb_dtype_name(cs[k].s), rb_dtype_name(cs[k].d));
            gp_expect_close(&d, gp_tol(cs[k].d, 1e-5), 1e-6, what);
            gp_free(&s2);
        }
        gp_free(&s);
        gp_free(&d);
    }
    /* in place, as the model does (x = tanh(x)) */
    gp x = MK(RB_F32, SH, GP_CONTIG, -3, 3);
    TU_OK(rb_unary(e->c, RB_UNARY_TANH, &x.c, &x.c));
    TU_OK(rb_unary(e->g, RB_UNARY_TANH, &x.g, &x.g));
    gp_expect_close(&x, 1e-5, 1e-6, "tanh in place");
    gp_free(&x);
}

static void test_binary_where(void **state) {
    PREP(12);
    for (int bc = -1; bc <= 4; bc++)
        for (int op = 0; op < RB_BINARY_COUNT_; op++) {
            int64_t bne[4] = {SH[0], SH[1], SH[2], SH[3]};
            if (bc >= 0 && bc <= 3) bne[bc] = 1;
            if (bc == 4) bne[0] = bne[1] = bne[2] = bne[3] = 1;
            const rb_dtype da = (bc & 1) ? RB_F16 : RB_F32, db = bc == 2 ? RB_BF16 : RB_F32;
            const rb_dtype dd = op == RB_BINARY_MUL ? RB_F16 : RB_F32;
            gp a = MK(da, SH, bc == 3 ? GP_PERM : GP_SLICE, -3, 3);
            gp b = MK(db, bne, bc == 0 ? GP_SLICE : GP_PERM, 0.5f, 2.5f);
            gp d = MK(dd, SH, bc == 1 ? GP_PERM : GP_CONTIG, -1, 1);
            TU_OK(rb_binary(e->c, (rb_binary_op)op, &d.c, &a.c, &b.c));
            TU_OK(rb_binary(e->g, (rb_binary_op)op, &d.g, &a.g, &b.g));
            char what[64];
            snprintf(what, sizeof what, "binary op %d bcast %d", op, bc);
            gp_expect_close(&d, gp_tol(dd, 1e-6), 1e-7, what);
            gp_free(&a);
            gp_free(&b);
            gp_free(&d);
        }
    /* the model's residual add in place: x = x + o */
    gp x = MK(RB_F32, SH, GP_CONTIG, -3, 3), o = MK(RB_F32, SH, GP_CONTIG, -3, 3);
    TU_OK(rb_binary(e->c, RB_BINARY_ADD, &x.c, &x.c, &o.c));
    TU_OK(rb_binary(e->g, RB_BINARY_ADD, &x.g, &x.g, &o.g));
    gp_expect_close(&x, 0, 0, "add in place");
    const int64_t cne[4] = {SH[0], 1, SH[2], 1};
    gp cd = MK(RB_I32, cne, GP_CONTIG, -1, 2), a = MK(RB_F32, SH, GP_PERM, -1, 1), b = MK(RB_BF16, SH, GP_SLICE, 2, 3);
    TU_OK(rb_where(e->c, &x.c, &cd.c, &a.c, &b.c));
    TU_OK(rb_where(e->g, &x.g, &cd.g, &a.g, &b.g));
    gp_expect_close(&x, 0, 0, "where");
    gp_free(&x);
    gp_free(&o);
    gp_free(&cd);
    gp_free(&a);
    gp_free(&b);
}

static void test_cast(void **state) {
    PREP(13);
    const rb_dtype fl[] = {RB_F32, RB_F16, RB_BF16, RB_I32};
    const gp_layout lays[] = {GP_CONTIG, GP_PERM, GP_SLICE};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 3; l++) {
                gp s = MK(fl[i], SH, lays[l], -300, 300), d = MK(fl[j], SH, lays[(l + 1) % 3], 0, 1);
                TU_OK(rb_cast(e->c, &d.c, &s.c));
                TU_OK(rb_cast(e->g, &d.g, &s.g));
                char what[64];
                snprintf(what, sizeof what, "cast %s->%s layout %d", rb_dtype_name(fl[i]), rb_dtype_name(fl[j]), l);
                gp_expect_close(&d, 0, 0, what); /* conversions are exact / identically rounded */
                gp_free(&s);
                gp_free(&d);
            }
    /* rows of contiguous f32/f16/bf16 with ne[0] % 4 == 0: the 4-wide rows
     * kernel (prefill casts activations this way) */
    const int64_t rne[4] = {256, 5, 3, 1};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int l = 0; l < 2; l++) {
                gp s = MK(fl[i], rne, l ? GP_SLICE : GP_CONTIG, -300, 300), d = MK(fl[j], rne, GP_CONTIG, 0, 1);
                TU_OK(rb_cast(e->c, &d.c, &s.c));
                TU_OK(rb_cast(e->g, &d.g, &s.g));
                char what[64];
                snprintf(what, sizeof what, "rows cast %s->%s layout %d", rb_dtype_name(fl[i]), rb_dtype_name(fl[j]),
                         l);
                gp_expect_close(&d, 0, 0, what);
                gp_free(&s);
                gp_free(&d);
            }
    /* KV-cache write: f32 [D, H, T] rows into an f16 cache view with a row stride */
    const int64_t kne[4] = {64, 4, 9, 1};
    gp k = MK(RB_F32, kne, GP_SLICE, -2, 2), c = MK(RB_F16, kne, GP_SLICE, 0, 1);
    TU_OK(rb_cast(e->c, &c.c, &k.c));
    TU_OK(rb_cast(e->g, &c.g, &k.g));
    gp_expect_close(&c, 0, 0, "kv cast f32->f16");
    gp_free(&k);
    gp_free(&c);
    /* dequantizing casts */
    const rb_dtype qs[] = {RB_Q4_0,   RB_Q8_0,   RB_Q4_K,    RB_Q5_K,  RB_Q6_K,    RB_IQ4_NL,
                           RB_IQ4_XS, RB_IQ3_XXS, RB_IQ3_S, RB_IQ2_XXS, RB_IQ2_XS, RB_IQ2_S, RB_IQ1_S, RB_IQ1_M};
    for (int q = 0; q < (int)(sizeof qs / sizeof qs[0]); q++) {
        const int64_t qne[4] = {512, 7, 2, 1};
        gp s = MK(qs[q], qne, GP_SLICE, -2, 2), d = MK(RB_F32, qne, GP_PERM, 0, 1);
        TU_OK(rb_cast(e->c, &d.c, &s.c));
        TU_OK(rb_cast(e->g, &d.g, &s.g));
        char what[64];
        snprintf(what, sizeof what, "dequantize %s", rb_dtype_name(qs[q]));
        /* the iq formats bit for bit (products of exact factors; the CPU equals ggml) */
        const bool iq = qs[q] == RB_IQ4_NL || qs[q] == RB_IQ4_XS || qs[q] == RB_IQ3_XXS || qs[q] == RB_IQ3_S ||
                        qs[q] == RB_IQ2_XXS || qs[q] == RB_IQ2_XS || qs[q] == RB_IQ2_S || qs[q] == RB_IQ1_S ||
                        qs[q] == RB_IQ1_M;
        gp_expect_close(&d, iq ? 0.0 : 1e-6, iq ? 0.0 : 1e-7, what);
        gp_free(&s);
        gp_free(&d);
    }
}

static void test_get_set_rows(void **state) {
    PREP(14);
    const rb_dtype tabs[] = {RB_F32,  RB_F16,  RB_BF16, RB_Q4_0,   RB_Q8_0,
                             RB_Q4_K, RB_Q5_K, RB_Q6_K, RB_IQ4_NL, RB_IQ4_XS, RB_IQ3_XXS, RB_IQ3_S,
                             RB_IQ2_XXS, RB_IQ2_XS, RB_IQ2_S, RB_IQ1_S, RB_IQ1_M};
    const int64_t V = 29;
    int32_t ids[10];
    for (int i = 0; i < 10; i++) ids[i] = (int32_t)(tu_rng_u64(&e->rng) % V);
    ids[3] = ids[7]; /* a repeated id */
    ids[0] = (int32_t)(V - 1);
    for (size_t t = 0; t < sizeof tabs / sizeof tabs[0]; t++) {
        const int64_t D = rb_dtype_info((int)tabs[t])->is_quant ? 512 : 45;
        const int64_t tne[4] = {D, V, 1, 1}, dne[4] = {D, 5, 2, 1};
        gp tab = MK(tabs[t], tne, GP_SLICE, -2, 2);
        gp id = gp_ids(e->c, e->g, ids, 5, 2);
        gp d = MK(t % 2 ? RB_F16 : RB_F32, dne, GP_SLICE, 0, 1);
        TU_OK(rb_get_rows(e->c, &d.c, &tab.c, &id.c));
        TU_OK(rb_get_rows(e->g, &d.g, &tab.g, &id.g));
        char what[64];
        snprintf(what, sizeof what, "get_rows %s", rb_dtype_name(tabs[t]));
        gp_expect_close(&d, gp_tol(d.g.dtype, 1e-6), 1e-7, what);
        gp_free(&d);
        /* an out-of-range id fails before anything is written */
        int32_t bad[10];
        memcpy(bad, ids, sizeof bad);
        bad[6] = (int32_t)V;
        gp bid = gp_ids(e->c, e->g, bad, 5, 2);
        gp d2 = MK(RB_F32, dne, GP_CONTIG, 0, 1);
        assert_int_equal(rb_get_rows(e->g, &d2.g, &tab.g, &bid.g), RB_E_RANGE);
        assert_true(gp_gpu_unchanged(&d2));
        gp_free(&d2);
        gp_free(&bid);
        gp_free(&id);
        gp_free(&tab);
    }
    /* set_rows: scatter f32 rows into an f16 cache [D, S, A, 1] */
    const int64_t sne[4] = {40, 6, 3, 1}, dne[4] = {40, 17, 3, 1};
    int32_t slots[6] = {16, 0, 5, 9, 3, 11};
    gp src = MK(RB_F32, sne, GP_PERM, -2, 2), dst = MK(RB_F16, dne, GP_SLICE, -1, 1);
    gp sl = gp_ids(e->c, e->g, slots, 6, 1);
    TU_OK(rb_set_rows(e->c, &dst.c, &src.c, &sl.c));
    TU_OK(rb_set_rows(e->g, &dst.g, &src.g, &sl.g));
    gp_expect_close(&dst, 0, 0, "set_rows");
    gp_free(&src);
    gp_free(&dst);
    /* contiguous source rows: the 4-wide rows kernel */
    src = MK(RB_F32, sne, GP_CONTIG, -2, 2);
    dst = MK(RB_F16, dne, GP_CONTIG, -1, 1);
    TU_OK(rb_set_rows(e->c, &dst.c, &src.c, &sl.c));
    TU_OK(rb_set_rows(e->g, &dst.g, &src.g, &sl.g));
    gp_expect_close(&dst, 0, 0, "set_rows (rows kernel)");
    gp_free(&src);
    gp_free(&dst);
    gp_free(&sl);
}

static void test_norms_softmax_reduce(void **state) {
    PREP(15);
    const int64_t ne[4] = {300, 7, 3, 1}, wne[4] = {300, 1, 1, 1};
    const rb_dtype dts[] = {RB_F32, RB_F16, RB_BF16};
    for (int i = 0; i < 3; i++) {
        gp s = MK(dts[i], ne, i == 1 ? GP_PERM : GP_SLICE, -3, 3), d = MK(dts[(i + 1) % 3], ne, GP_CONTIG, 0, 1);
        gp w = MK(RB_F32, wne, GP_CONTIG, 0.5f, 1.5f), b = MK(RB_F16, wne, GP_CONTIG, -1, 1);
        TU_OK(rb_rms_norm(e->c, &d.c, &s.c, &w.c, 1e-6f));
        TU_OK(rb_rms_norm(e->g, &d.g, &s.g, &w.g, 1e-6f));
        gp_expect_close(&d, gp_tol(d.g.dtype, 1e-5), 1e-6, "rms_norm");
        TU_OK(rb_rms_norm(e->c, &d.c, &s.c, NULL, 1e-5f));
        TU_OK(rb_rms_norm(e->g, &d.g, &s.g, NULL, 1e-5f));
        gp_expect_close(&d, gp_tol(d.g.dtype, 1e-5), 1e-6, "rms_norm no weight");
        if (i == 0) { /* contiguous f32 rows: the register-resident kernel, also in place */
            const int64_t fne[4] = {4096, 3, 2, 1}, fw[4] = {4096, 1, 1, 1};
            gp fs = MK(RB_F32, fne, GP_CONTIG, -3, 3), fd = MK(RB_F32, fne, GP_CONTIG, 0, 1);
            gp fwt = MK(RB_F32, fw, GP_CONTIG, 0.5f, 1.5f);
            TU_OK(rb_rms_norm(e->c, &fd.c, &fs.c, &fwt.c, 1e-6f));
            TU_OK(rb_rms_norm(e->g, &fd.g, &fs.g, &fwt.g, 1e-6f));
            gp_expect_close(&fd, 1e-6, 1e-9, "rms_norm f32 rows");
            TU_OK(rb_rms_norm(e->c, &fs.c, &fs.c, NULL, 1e-6f));
            TU_OK(rb_rms_norm(e->g, &fs.g, &fs.g, NULL, 1e-6f));
            gp_expect_close(&fs, 1e-6, 1e-9, "rms_norm f32 rows in place");
            gp_free(&fs);
            gp_free(&fd);
            gp_free(&fwt);
        }
        TU_OK(rb_layer_norm(e->c, &d.c, &s.c, &w.c, &b.c, 1e-5f));
        TU_OK(rb_layer_norm(e->g, &d.g, &s.g, &w.g, &b.g, 1e-5f));
        gp_expect_close(&d, gp_tol(d.g.dtype, 1e-5), 1e-5, "layer_norm");
        /* softmax with an f16 mask broadcast over dims 2 (with -inf entries and
         * one fully masked row) */
        const int64_t mne[4] = {300, 7, 1, 1};
        gp m = MK(i == 2 ? RB_F32 : RB_F16, mne, GP_CONTIG, -2, 2);
        {
            unsigned char *bytes = malloc(m.size);
            memcpy(bytes, m.orig, m.size);
            const size_t es = rb_dtype_info((int)m.g.dtype)->type_size;
            for (int64_t r = 0; r < 7; r++)
                for (int64_t c = 0; c < 300; c++)
                    if (r == 4 || (c * 7 + r) % 5 == 0) {
                        unsigned char *p = bytes + (size_t)(r * 300 + c) * es;
                        if (es == 2) { uint16_t ninf = 0xFC00; memcpy(p, &ninf, 2); }
                        else { float ninf = -INFINITY; memcpy(p, &ninf, 4); }
                    }
            TU_OK(rb_buffer_set(m.cb, 0, bytes, m.size));
            TU_OK(rb_buffer_set(m.gb, 0, bytes, m.size));
            memcpy(m.orig, bytes, m.size);
            free(bytes);
        }
        TU_OK(rb_softmax(e->c, &d.c, &s.c, &m.c, 0.7f));
        TU_OK(rb_softmax(e->g, &d.g, &s.g, &m.g, 0.7f));
        gp_expect_close(&d, gp_tol(d.g.dtype, 1e-5), 1e-7, "softmax masked");
        TU_OK(rb_softmax(e->c, &d.c, &s.c, NULL, 1.3f));
        TU_OK(rb_softmax(e->g, &d.g, &s.g, NULL, 1.3f));
        gp_expect_close(&d, gp_tol(d.g.dtype, 1e-5), 1e-7, "softmax");
        const int64_t rne[4] = {1, 7, 3, 1};
        for (int op = 0; op < RB_REDUCE_COUNT_; op++) {
            gp r = MK(op == RB_REDUCE_ARGMAX ? RB_I32 : RB_F32, rne, GP_SLICE, 0, 1);
            TU_OK(rb_reduce(e->c, (rb_reduce_op)op, &r.c, &s.c));
            TU_OK(rb_reduce(e->g, (rb_reduce_op)op, &r.g, &s.g));
            char what[32];
            snprintf(what, sizeof what, "reduce %d", op);
            gp_expect_close(&r, 1e-5, 1e-5, what);
            gp_free(&r);
        }
        gp_free(&s);
        gp_free(&d);
        gp_free(&w);
        gp_free(&b);
        gp_free(&m);
    }
}

static void test_rope(void **state) {
    PREP(16);
    const int64_t ne[4] = {64, 5, 7, 2}; /* head_dim, heads, T, B */
    int32_t pos[7] = {0, 1, 17, 300, 4095, 12000, 2};
    const int nrots[] = {64, 40};
    for (int mode = 0; mode < 2; mode++)
        for (int r = 0; r < 2; r++)
            for (int ffi = 0; ffi < 2; ffi++) {
                const rb_dtype sd = r ? RB_F16 : RB_F32;
                gp s = MK(sd, ne, r ? GP_PERM : GP_SLICE, -2, 2), d = MK(RB_F32, ne, GP_SLICE, 0, 1);
                gp p = gp_ids(e->c, e->g, pos, 7, 1);
                const int64_t fne[4] = {nrots[r] / 2, 1, 1, 1};
                gp ff = MK(RB_F32, fne, GP_CONTIG, 1, 8);
                rb_rope_params pc = {.n_rot = nrots[r], .mode = mode ? RB_ROPE_NEOX : RB_ROPE_NORMAL,
                                     .freq_base = 10000.0f, .freq_scale = r ? 0.25f : 1.0f, .attn_factor = 1.0f,
                                     .freq_factors = ffi ? &ff.c : NULL};
                rb_rope_params pg = pc;
                pg.freq_factors = ffi ? &ff.g : NULL;
                TU_OK(rb_rope(e->c, &d.c, &s.c, &p.c, &pc));
                TU_OK(rb_rope(e->g, &d.g, &s.g, &p.g, &pg));
                char what[64];
                snprintf(what, sizeof what, "rope mode %d n_rot %d ff %d", mode, nrots[r], ffi);
                gp_expect_close(&d, 1e-5, 1e-6, what);
                /* in place on f32 */
                gp x = MK(RB_F32, ne, GP_CONTIG, -2, 2);
                TU_OK(rb_rope(e->c, &x.c, &x.c, &p.c, &pc));
                TU_OK(rb_rope(e->g, &x.g, &x.g, &p.g, &pg));
                gp_expect_close(&x, 1e-5, 1e-6, "rope in place");
                gp_free(&x);
                gp_free(&s);
                gp_free(&d);
                gp_free(&p);
                gp_free(&ff);
            }
}

/* The half of a [2F, ...] pair starting at element `first` of each row (both
 * sides); shares the parents, so it must not be gp_free'd. */
static gp half_of(const gp *p, int64_t first) {
    gp v = *p;
    v.c.ne[0] = v.g.ne[0] = p->c.ne[0] / 2;
    v.c.offs += (size_t)first * p->c.nb[0];
    v.g.offs += (size_t)first * p->g.nb[0];
    return v;
}

/* rb_glu (gate/up as strided halves of one projection, in place) and
 * rb_add_rms_norm (delta aliasing h too) on the GPU vs the CPU backend. */
static void test_fused(void **state) {
    PREP(17);
    const struct { int64_t ne[4]; gp_layout lay; } gcases[] = {
        {{2 * 1000, 7, 1, 1}, GP_CONTIG}, {{2 * 9, 13, 3, 2}, GP_PERM}, {{2 * 4097, 2, 1, 1}, GP_SLICE}};
    const rb_unary_op acts[4] = {RB_UNARY_SILU, RB_UNARY_GELU_TANH, RB_UNARY_GELU, RB_UNARY_RELU};
    for (size_t k = 0; k < 3; k++)
        for (int a = 0; a < 4; a++) {
            const int64_t *pne = gcases[k].ne, F = pne[0] / 2, dne[4] = {F, pne[1], pne[2], pne[3]};
            /* |gate| <= 4, |up| <= 1.5: where 1 + tanh / 1 + erf cancel (gate near -4) the
             * absolute error of either side's f32 tanhf/erff is below the 1e-6 floor */
            gp p = MK(RB_F32, pne, gcases[k].lay, -4, 4);
            gp g = half_of(&p, 0), u = half_of(&p, F);
            { /* the up half: scaled into [-1.5, 1.5] */
                for (int64_t i3 = 0; i3 < pne[3]; i3++)
                    for (int64_t i2 = 0; i2 < pne[2]; i2++)
                        for (int64_t i1 = 0; i1 < pne[1]; i1++)
                            for (int64_t i0 = 0; i0 < F; i0++) {
                                unsigned char *q = p.orig + u.c.offs + (size_t)i0 * u.c.nb[0] +
                                                   (size_t)i1 * u.c.nb[1] + (size_t)i2 * u.c.nb[2] +
                                                   (size_t)i3 * u.c.nb[3];
                                float v;
                                memcpy(&v, q, 4);
                                v *= 0.375f;
                                memcpy(q, &v, 4);
                            }
                TU_OK(rb_buffer_set(p.cb, 0, p.orig, p.size));
                TU_OK(rb_buffer_set(p.gb, 0, p.orig, p.size));
            }
            gp d = MK(RB_F32, dne, k == 1 ? GP_SLICE : GP_CONTIG, -1, 1);
            TU_OK(rb_glu(e->c, &d.c, &g.c, &u.c, acts[a]));
            TU_OK(rb_glu(e->g, &d.g, &g.g, &u.g, acts[a]));
            char what[64];
            snprintf(what, sizeof what, "glu act %d case %zu", (int)acts[a], k);
            gp_expect_close(&d, 1e-6, 1e-6, what);
            assert_true(gp_gpu_unchanged(&p));
            /* in place over up: the gate half stays untouched */
            TU_OK(rb_glu(e->c, &u.c, &g.c, &u.c, acts[a]));
            TU_OK(rb_glu(e->g, &u.g, &g.g, &u.g, acts[a]));
            gp_expect_close(&u, 1e-6, 1e-6, "glu in place");
            gp_free(&d);
            gp_free(&p);
        }
    /* the last five take the register-resident kernel (contiguous aligned
     * f32 rows): 256 threads x 1, 4, 8 float4 and 1024 x 8, with the weight
     * as aligned f32 (float4 loads), bf16 or none */
    const struct { int64_t ne[4]; gp_layout lx, ld, lh; rb_dtype wdt; bool w; gp_layout lw; } ncases[] = {
        {{2048, 7, 1, 1}, GP_CONTIG, GP_CONTIG, GP_CONTIG, RB_F32, true, GP_SLICE},
        {{7, 13, 3, 2}, GP_PERM, GP_SLICE, GP_PERM, RB_BF16, true, GP_SLICE},
        {{4097, 3, 1, 1}, GP_SLICE, GP_CONTIG, GP_SLICE, RB_F16, true, GP_SLICE},
        {{1, 3, 1, 1}, GP_SLICE, GP_PERM, GP_CONTIG, RB_F32, false, GP_SLICE},
        {{300, 70, 1, 1}, GP_CONTIG, GP_SLICE, GP_CONTIG, RB_F32, false, GP_SLICE},
        {{64, 5, 1, 1}, GP_CONTIG, GP_CONTIG, GP_CONTIG, RB_F32, true, GP_CONTIG},
        {{4096, 3, 2, 1}, GP_CONTIG, GP_CONTIG, GP_CONTIG, RB_F32, true, GP_CONTIG},
        {{8188, 2, 1, 1}, GP_CONTIG, GP_CONTIG, GP_CONTIG, RB_BF16, true, GP_CONTIG},
        {{12000, 2, 1, 1}, GP_CONTIG, GP_CONTIG, GP_CONTIG, RB_F32, true, GP_CONTIG},
        {{5000, 4, 1, 1}, GP_CONTIG, GP_CONTIG, GP_CONTIG, RB_F32, false, GP_CONTIG}};
    for (size_t k = 0; k < sizeof ncases / sizeof ncases[0]; k++)
        for (int alias = 0; alias < 2; alias++) { /* 1: delta is h's view */
            const int64_t *ne = ncases[k].ne, wne[4] = {ne[0], 1, 1, 1};
            gp x = MK(RB_F32, ne, ncases[k].lx, -3, 3), dl = MK(RB_F32, ne, ncases[k].ld, -2, 2);
            gp h = MK(RB_F32, ne, ncases[k].lh, -2, 2), w = MK(ncases[k].wdt, wne, ncases[k].lw, 0.5f, 1.5f);
            TU_OK(rb_add_rms_norm(e->c, &x.c, alias ? &h.c : &dl.c, ncases[k].w ? &w.c : NULL, 1e-6f, &h.c));
            TU_OK(rb_add_rms_norm(e->g, &x.g, alias ? &h.g : &dl.g, ncases[k].w ? &w.g : NULL, 1e-6f, &h.g));
            char what[64];
            snprintf(what, sizeof what, "add_rms_norm case %zu alias %d: x", k, alias);
            gp_expect_close(&x, 0, 0, what); /* one f32 addition: identical */
            snprintf(what, sizeof what, "add_rms_norm case %zu alias %d: h", k, alias);
            gp_expect_close(&h, 1e-6, 1e-9, what); /* double sum of squares on both sides */
            assert_true(gp_gpu_unchanged(&dl));
            gp_free(&x);
            gp_free(&dl);
            gp_free(&h);
            gp_free(&w);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fill_affine_unary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_where, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cast, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_set_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_norms_softmax_reduce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rope, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
