/* rb_attention on the GPU, three kernels:
 *  - generic (f32 math; f32 K/V or unaligned 16-bit rows): against the CPU
 *    backend with |gpu - cpu| <= 2e-6 + 2e-5 |cpu| (both accumulate in f32):
 *    prefill, decode over 1000 keys (split keys), chunked prefill with a
 *    sliding window and soft-capping, masks, Dv != D, no visible key, and
 *    refusal of head dims beyond the kernel's limit.
 *  - decode (16-bit K/V in the model's cache layout, Tq < 16): same bound;
 *    the decode sets run on both decode kernels (att_decode_wide.cuh for D
 *    = 64 and 128, and att_decode.cuh through the tuning's narrow_decode_att).
 *  - tensor cores (same layouts, Tq >= 16; Q and P rounded to the K/V type):
 *    rel L2 <= 2e-3 (f16) / 1e-2 (bf16) and max |diff| <= 2e-3 / 1e-2 against
 *    the f32 CPU result on the same K/V (outputs are averages of values in
 *    [-1, 1]; a quick emulation of the roundings gives 2e-4 / 1.5e-3).
 * Cases sweep D in {64, 80, 96, 128, 256}, Hq/Hkv in {2/2, 8/2, 8/1}, Tq in
 * {1, 7, 16, 100, 512} with odd Tk, f16 and bf16, causal / window / softcap /
 * mask / positions on the device (q_pos). q_pos results are checked against
 * a double-precision reference written here (arbitrary, unsorted positions)
 * and, where positions are consecutive, against the CPU's q_pos0 form. For
 * a decode step over a whole 4096-key cache, the rows past the position are
 * NaN: a kernel that touched them would fail; a sweep of positions on one
 * launch shape checks the decode kernel's in-kernel merge of key splits. Every
 * one-query decode case also runs with keys_settled, its new row written by
 * rb_set_rows just ahead (run_settled): within 1e-5 of the largest output
 * of the launch without (up to 64 keys it takes another path, summing in
 * another order; a row read too early is NaN); and
 * test_attention_settled runs the model's order (a long fused product
 * writing the new k/v rows, the attention starting during it). test_attention_sinks
 * runs gpt-oss's attention sinks through every kernel (sink_sets), against
 * the double reference with sinks and the CPU backend. GPU outputs start as NaN
 * (unwritten elements fail) and bytes outside the output view must stay. */
#include "gpu_pair.h"

#include "backends/gpu/gpu_tuning.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Swaps dims 1 and 2 of both views: a contiguous [D, H, T] parent seen as
 * [D, T, H], like a KV-cache slice. */
static void swap12(gp *x) {
    rb_tensor *ts[2] = {&x->c, &x->g};
    for (int i = 0; i < 2; i++) {
        int64_t ne = ts[i]->ne[1];
        size_t nb = ts[i]->nb[1];
        ts[i]->ne[1] = ts[i]->ne[2];
        ts[i]->nb[1] = ts[i]->nb[2];
        ts[i]->ne[2] = ne;
        ts[i]->nb[2] = nb;
    }
}

typedef struct acase {
    const char *name;
    int64_t D, Dv, Tq, Tk, Hq, Hkv, B;
    rb_dtype qt, kvt;
    bool causal, mask;
    int window;
    float softcap;
    int64_t q_pos0;
} acase;

static void run_case(rb_backend *c, rb_backend *g, tu_rng *rng, const acase *k) {
    /* q: [D, Hq, Tq] parent seen as [D, Tq, Hq] (the model's qr view) */
    const int64_t qne[4] = {k->D, k->Hq, k->Tq, k->B}, kne[4] = {k->D, k->Hkv, k->Tk, k->B},
                  vne[4] = {k->Dv, k->Hkv, k->Tk, k->B}, dne[4] = {k->Dv, k->Hq, k->Tq, k->B},
                  mne[4] = {k->Tk, k->Tq, 1, 1};
    gp q = gp_make(c, g, rng, k->qt, qne, GP_CONTIG, -1, 1);
    gp kk = gp_make(c, g, rng, k->kvt, kne, GP_SLICE, -1, 1);
    gp v = gp_make(c, g, rng, k->kvt, vne, GP_SLICE, -1, 1);
    gp d = gp_make(c, g, rng, RB_F32, dne, GP_SLICE, -5, 5);
    gp m = gp_make(c, g, rng, RB_F32, mne, GP_CONTIG, -3, 1);
    swap12(&q);
    swap12(&kk);
    swap12(&v);
    rb_attn_params pc = {.scale = 1.0f / sqrtf((float)k->D), .softcap = k->softcap, .causal = k->causal,
                         .window = k->window, .q_pos0 = k->q_pos0, .mask = k->mask ? &m.c : NULL};
    rb_attn_params pg = pc;
    pg.mask = k->mask ? &m.g : NULL;
    TU_OK(rb_attention(c, &d.c, &q.c, &kk.c, &v.c, &pc));
    TU_OK(rb_attention(g, &d.g, &q.g, &kk.g, &v.g, &pg));
    gp_expect_close(&d, 2e-5, 2e-6, k->name);
    print_message("attention %-28s ok\n", k->name);
    gp_free(&q);
    gp_free(&kk);
    gp_free(&v);
    gp_free(&d);
    gp_free(&m);
}

static void test_attention(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 900);
    const acase cases[] = {
        {"prefill causal gqa", 64, 64, 37, 37, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0},
        {"decode 1000 keys", 128, 128, 1, 1000, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 999},
        {"decode batch 2 no gqa", 64, 64, 1, 333, 4, 4, 2, RB_F16, RB_F16, true, false, 0, 0.0f, 332},
        {"chunk window softcap", 64, 64, 20, 300, 6, 3, 1, RB_F32, RB_F16, true, false, 64, 30.0f, 280},
        {"decode window split", 64, 64, 1, 900, 2, 1, 1, RB_F32, RB_F16, true, false, 400, 0.0f, 899},
        {"mask bf16 D40 Dv24", 40, 24, 13, 29, 4, 2, 2, RB_BF16, RB_BF16, false, true, 0, 0.0f, 0},
        {"f32 kv causal mask", 48, 48, 9, 50, 3, 1, 1, RB_F32, RB_F32, true, true, 0, 20.0f, 41},
        {"no visible key", 32, 32, 4, 30, 2, 1, 1, RB_F32, RB_F16, true, false, 10, 0.0f, 50},
        {"gemma-like D256", 256, 256, 5, 70, 4, 2, 1, RB_F32, RB_F16, true, false, 0, 50.0f, 65},
        {"f32 kv decode 3000 keys", 128, 128, 1, 3000, 4, 1, 1, RB_F32, RB_F32, true, false, 0, 0.0f, 2999},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(c, g, &rng, &cases[i]);

    /* Dv beyond the kernel's limit: refused, nothing written */
    const int64_t qne[4] = {64, 5, 2, 1}, vne[4] = {520, 5, 2, 1}, dne[4] = {520, 2, 5, 1};
    gp q = gp_make(c, g, &rng, RB_F32, qne, GP_CONTIG, -1, 1);
    gp v = gp_make(c, g, &rng, RB_F16, vne, GP_CONTIG, -1, 1);
    gp d = gp_make(c, g, &rng, RB_F32, dne, GP_CONTIG, -1, 1);
    rb_attn_params p = {.scale = 0.1f, .causal = true};
    assert_int_equal(rb_attention(g, &d.g, &q.g, &q.g, &v.g, &p), RB_E_UNSUPPORTED);
    assert_true(gp_gpu_unchanged(&d));
    gp_free(&q);
    gp_free(&v);
    gp_free(&d);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

/* ---- the 16-bit kernels: model cache layouts, tolerances by kernel ---- */

typedef struct fcase {
    int64_t D, Tq, Tk, Hq, Hkv, B;
    rb_dtype qt, kvt;
    bool causal, mask;
    int window;
    float softcap;
    int64_t q_pos0;        /* positions q_pos0 + i when pos == NULL */
    const int32_t *pos;    /* non-NULL: passed as q_pos on the device */
    bool nan_past;         /* K/V rows past the largest position are NaN */
    bool sinks;            /* a sink logit per query head (rb_attn_params.sinks) */
} fcase;

/* Sets the K/V elements of tokens [from, to) to NaN (x is a swapped
 * [D, T, H, B] view of a contiguous parent): on both sides and in orig, or
 * (gpu_only) on the GPU side alone, orig keeping the values. */
static void nan_rows(gp *x, int64_t from, int64_t to, bool gpu_only) {
    const rb_tensor *t = &x->c;
    const uint16_t nanbits = t->dtype == RB_BF16 ? 0x7fc0 : 0x7e00;
    unsigned char *b = gpu_only ? malloc(x->size) : x->orig;
    assert_non_null(b);
    if (gpu_only) memcpy(b, x->orig, x->size);
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = from; i1 < to; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                    memcpy(b + t->offs + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], &nanbits, 2);
    if (!gpu_only) TU_OK(rb_buffer_set(x->cb, 0, b, x->size));
    TU_OK(rb_buffer_set(x->gb, 0, b, x->size));
    if (gpu_only) free(b);
}

/* GPU side of the output view (f32, f16 or bf16) set to NaN (orig keeps
 * the bytes around it). */
static void poison_out(gp *x) {
    unsigned char *p = malloc(x->size);
    assert_non_null(p);
    memcpy(p, x->orig, x->size);
    const rb_tensor *t = &x->g;
    const float nanv = NAN;
    const uint16_t nan16 = t->dtype == RB_BF16 ? 0x7fc0 : 0x7e00;
    const void *nanp = t->dtype == RB_F32 ? (const void *)&nanv : (const void *)&nan16;
    const size_t es = t->dtype == RB_F32 ? 4 : 2;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                    memcpy(p + t->offs + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], nanp, es);
    TU_OK(rb_buffer_set(x->gb, 0, p, x->size));
    free(p);
}

/* Naive double attention on decoded inputs: q [D,Tq,Hq,B], k [D,Tk,Hkv,B],
 * v [D,Tk,Hkv,B], mask [Tk,Tq] or NULL, pos[Tq], sinks [Hq] or NULL (a
 * logit in each softmax's denominator without a value); out [D,Hq,Tq,B]. */
static void ref_attention(const fcase *f, const double *q, const double *k, const double *v, const double *mask,
                          const int64_t *pos, const double *sinks, double *out) {
    const int64_t D = f->D, Tq = f->Tq, Tk = f->Tk, Hq = f->Hq, Hkv = f->Hkv, r = Hq / Hkv;
    const double scale = (double)(1.0f / sqrtf((float)D));
    double *s = malloc(sizeof(double) * (size_t)Tk);
    assert_non_null(s);
    for (int64_t b = 0; b < f->B; b++)
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t h = 0; h < Hq; h++) {
                const int64_t gk = h / r;
                const double *qr = q + D * (i + Tq * (h + Hq * b));
                double mx = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    s[j] = -INFINITY;
                    if ((f->causal && j > pos[i]) || (f->window > 0 && pos[i] - j >= f->window)) continue;
                    const double *kr = k + D * (j + Tk * (gk + Hkv * b));
                    double x = 0;
                    for (int64_t d = 0; d < D; d++) x += qr[d] * scale * kr[d];
                    if (f->softcap > 0) x = f->softcap * tanh(x / f->softcap);
                    if (mask) x += mask[j + Tk * i];
                    s[j] = x;
                    mx = x > mx ? x : mx;
                }
                double *o = out + D * (h + Hq * (i + Tq * b));
                for (int64_t d = 0; d < D; d++) o[d] = 0;
                if (mx == -INFINITY) continue;
                if (sinks && sinks[h] > mx) mx = sinks[h];
                double l = sinks ? exp(sinks[h] - mx) : 0;
                for (int64_t j = 0; j < Tk; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = exp(s[j] - mx);
                    l += p;
                    const double *vr = v + D * (j + Tk * (gk + Hkv * b));
                    for (int64_t d = 0; d < D; d++) o[d] += p * vr[d];
                }
                for (int64_t d = 0; d < D; d++) o[d] /= l;
            }
    free(s);
}

static bool tc_path(const fcase *f) { return f->Tq >= 16 && f->kvt != RB_F32; }

/* gpu vs ref with the bound of the kernel that ran */
static void check_out(const fcase *f, const gp *d, const double *ref, const char *name, const char *against) {
    double *gv = gp_read(d, 1);
    const int64_t n = rb_tensor_nelements(&d->g);
    double num = 0, den = 0, maxd = 0;
    for (int64_t e = 0; e < n; e++) {
        if (!isfinite(gv[e])) fail_msg("%s: element %lld is %g (unwritten or NaN)", name, (long long)e, gv[e]);
        const double diff = fabs(gv[e] - ref[e]);
        num += diff * diff;
        den += ref[e] * ref[e];
        maxd = diff > maxd ? diff : maxd;
        if (!tc_path(f) && !(diff <= 2e-6 + 2e-5 * fabs(ref[e])))
            fail_msg("%s: element %lld: gpu %.9g, %s %.9g (|diff| %.3g > 2e-6 + 2e-5 |ref|)", name, (long long)e,
                     gv[e], against, ref[e], diff);
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (tc_path(f)) {
        const double rmax = f->kvt == RB_BF16 ? 1e-2 : 2e-3, amax = f->kvt == RB_BF16 ? 1e-2 : 2e-3;
        if (!(rel <= rmax) || !(maxd <= amax))
            fail_msg("%s: tensor-core result vs %s: rel L2 %.3g (bound %.0e), max |diff| %.3g (bound %.0e)", name,
                     against, rel, rmax, maxd, amax);
    }
    print_message("attention %-52s %-4s vs %-6s rel L2 %.2e max %.2e\n", name, tc_path(f) ? "tc" : "dec", against,
                  rel, maxd);
    free(gv);
}

/* The same decode launch over settled rows (rb_attn_params.keys_settled),
 * the row at the query's position poisoned and rewritten by rb_set_rows
 * queued just ahead: the output must equal the launch without keys_settled
 * (d holds it) within 1e-5 of its largest element, for every shape of the
 * sweep (head dims, windows, key splits). Up to 64 keys the settled launch
 * spreads them over a block's warps (the short path), so the sums run in
 * another order: measured differences are ~1e-6 of the largest output,
 * where a stale or poisoned row gives NaN or a difference of its size.
 * (That small kernel ends before the attention's blocks start:
 * test_attention_settled makes them overlap.) */
static void run_settled(rb_backend *c, rb_backend *g, const fcase *f, gp *q, gp *k, gp *v, gp *d,
                        const rb_attn_params *p, const char *name) {
    const int64_t pos = f->pos[0];
    double *want = gp_read(d, 1);
    gp rows[2];
    gp *kv[2] = {k, v};
    for (int w = 0; w < 2; w++) { /* [D, 1, Hkv, B]: the original row pos */
        const rb_tensor *t = &kv[w]->c;
        const int64_t rne[4] = {t->ne[0], 1, t->ne[2], t->ne[3]};
        tu_rng r;
        tu_rng_seed(&r, 1);
        rows[w] = gp_make(c, g, &r, t->dtype, rne, GP_CONTIG, -1, 1);
        const rb_tensor *rt = &rows[w].c;
        for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
                    memcpy(rows[w].orig + rt->offs + i0 * rt->nb[0] + i2 * rt->nb[2] + i3 * rt->nb[3],
                           kv[w]->orig + t->offs + i0 * t->nb[0] + pos * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3],
                           rb_dtype_info((int)t->dtype)->type_size);
        TU_OK(rb_buffer_set(rows[w].gb, 0, rows[w].orig, rows[w].size));
        nan_rows(kv[w], pos, pos + 1, true);
    }
    const int32_t id = (int32_t)pos;
    gp ids = gp_ids(c, g, &id, 1, 1);
    poison_out(d);
    TU_OK(rb_backend_sync(g));
    rb_attn_params ps = *p;
    ps.keys_settled = true;
    TU_OK(rb_set_rows(g, &k->g, &rows[0].g, &ids.g));
    TU_OK(rb_set_rows(g, &v->g, &rows[1].g, &ids.g));
    TU_OK(rb_attention(g, &d->g, &q->g, &k->g, &v->g, &ps));
    TU_OK(rb_backend_sync(g));
    double *got = gp_read(d, 1);
    const int64_t n = rb_tensor_nelements(&d->g);
    double big = 0.0;
    for (int64_t e = 0; e < n; e++) big = fmax(big, fabs(want[e]));
    for (int64_t e = 0; e < n; e++)
        if (!(fabs(got[e] - want[e]) <= 1e-5 * big))
            fail_msg("%s keys_settled: element %lld = %.9g, %.9g without", name, (long long)e, got[e], want[e]);
    free(got);
    free(want);
    gp_free(&ids);
    gp_free(&rows[0]);
    gp_free(&rows[1]);
}

static void run_fast(rb_backend *c, rb_backend *g, tu_rng *rng, const fcase *f) {
    char name[160];
    snprintf(name, sizeof name, "D%lld Tq%lld Tk%lld H%lld/%lld B%lld %s%s%s%s%s%s%s", (long long)f->D,
             (long long)f->Tq, (long long)f->Tk, (long long)f->Hq, (long long)f->Hkv, (long long)f->B,
             rb_dtype_name(f->kvt), f->causal ? " causal" : "", f->window ? " window" : "",
             f->softcap > 0 ? " softcap" : "", f->mask ? " mask" : "", f->pos ? " q_pos" : "",
             f->sinks ? " sinks" : "");
    const int64_t qne[4] = {f->D, f->Hq, f->Tq, f->B}, kne[4] = {f->D, f->Hkv, f->Tk, f->B},
                  dne[4] = {f->D, f->Hq, f->Tq, f->B}, mne[4] = {f->Tk, f->Tq, 1, 1};
    gp q = gp_make(c, g, rng, f->qt, qne, GP_CONTIG, -2, 2);
    gp k = gp_make(c, g, rng, f->kvt, kne, GP_CONTIG, -1, 1);
    gp v = gp_make(c, g, rng, f->kvt, kne, GP_CONTIG, -1, 1);
    gp d = gp_make(c, g, rng, RB_F32, dne, GP_SLICE, -5, 5);
    gp m = gp_make(c, g, rng, RB_F32, mne, GP_CONTIG, -3, 1);
    swap12(&q);
    swap12(&k);
    swap12(&v);
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)f->Tq);
    assert_non_null(pos);
    int64_t pmax = -1;
    bool consecutive = true;
    for (int64_t i = 0; i < f->Tq; i++) {
        pos[i] = f->pos ? f->pos[i] : f->q_pos0 + i;
        pmax = pos[i] > pmax ? pos[i] : pmax;
        if (i > 0 && pos[i] != pos[i - 1] + 1) consecutive = false;
    }
    if (f->nan_past) {
        nan_rows(&k, pmax + 1, f->Tk, false);
        nan_rows(&v, pmax + 1, f->Tk, false);
    }
    gp qp = {0};
    if (f->pos) qp = gp_ids(c, g, f->pos, f->Tq, 1);
    /* sinks: one head's far above every score (its output ~0), one's far below (none) */
    const int64_t sne[4] = {f->Hq, 1, 1, 1};
    gp sk = {0};
    if (f->sinks) {
        sk = gp_make(c, g, rng, RB_F32, sne, GP_CONTIG, -2, 4);
        const float big = 25.0f, tiny = -30.0f;
        memcpy(sk.orig, &big, 4);
        if (f->Hq > 1) memcpy(sk.orig + 4, &tiny, 4);
        TU_OK(rb_buffer_set(sk.cb, 0, sk.orig, sk.size));
        TU_OK(rb_buffer_set(sk.gb, 0, sk.orig, sk.size));
    }
    poison_out(&d);
    rb_attn_params pg = {.scale = 1.0f / sqrtf((float)f->D), .softcap = f->softcap, .causal = f->causal,
                         .window = f->window, .q_pos0 = f->pos ? 0 : f->q_pos0, .mask = f->mask ? &m.g : NULL,
                         .q_pos = f->pos ? &qp.g : NULL, .sinks = f->sinks ? &sk.g : NULL};
    TU_OK(rb_attention(g, &d.g, &q.g, &k.g, &v.g, &pg));
    TU_OK(rb_backend_sync(g));
    if (!f->pos || consecutive) {
        /* the CPU backend in q_pos0 form on the same tensors */
        rb_attn_params pc = pg;
        pc.q_pos = NULL;
        pc.q_pos0 = pos[0];
        pc.mask = f->mask ? &m.c : NULL;
        pc.sinks = f->sinks ? &sk.c : NULL;
        TU_OK(rb_attention(c, &d.c, &q.c, &k.c, &v.c, &pc));
        double *ref = gp_read(&d, 0);
        check_out(f, &d, ref, name, "cpu");
        free(ref);
    }
    if (f->pos) {
        double *qd = gp_read(&q, 0), *kd = gp_read(&k, 0), *vd = gp_read(&v, 0), *md = f->mask ? gp_read(&m, 0) : NULL;
        double *sd = f->sinks ? gp_read(&sk, 0) : NULL;
        double *ref = malloc(sizeof(double) * (size_t)rb_tensor_nelements(&d.g));
        assert_non_null(ref);
        ref_attention(f, qd, kd, vd, md, pos, sd, ref);
        check_out(f, &d, ref, name, "double");
        free(sd);
        free(qd);
        free(kd);
        free(vd);
        free(md);
        free(ref);
    }
    /* every element finite (checked above) and nothing written around the view */
    gp_expect_close(&d, 1e300, 1e300, name);
    if (f->pos && f->Tq == 1 && f->causal && !f->mask) run_settled(c, g, f, &q, &k, &v, &d, &pg, name);
    free(pos);
    if (f->pos) gp_free(&qp);
    if (f->sinks) gp_free(&sk);
    gp_free(&q);
    gp_free(&k);
    gp_free(&v);
    gp_free(&d);
    gp_free(&m);
}

/* The decode sets of test_attention_16bit: whole 4096-key caches, short
 * contexts, a sweep of positions on one launch shape, unsorted positions. */
static void decode_sets(rb_backend *c, rb_backend *g, tu_rng *rng) {
    int32_t posbuf[40];
    /* decode steps over a whole 4096-key cache, rows past the position NaN */
    const int32_t p100[1] = {100}, plast[1] = {4095}, pmid[1] = {2047};
    const fcase dec[] = {
        {128, 1, 4096, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, p100, true, false},
        {128, 1, 4096, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, plast, false, false},
        {128, 1, 4096, 32, 8, 1, RB_F32, RB_BF16, true, false, 0, 0.0f, 0, pmid, true, false},
        {64, 1, 4096, 8, 8, 1, RB_F32, RB_F16, true, false, 512, 0.0f, 0, p100, true, false},
        {256, 1, 4096, 8, 4, 1, RB_F32, RB_F16, true, false, 1024, 50.0f, 0, pmid, true, false},
        {80, 1, 4096, 4, 1, 1, RB_F32, RB_BF16, true, false, 0, 0.0f, 0, plast, false, false},
    };
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) run_fast(c, g, rng, &dec[i]);
    /* at most 64 visible keys (the settled launch's short path): a window
     * starting past 0 with softcap and two heads a block, one key, 64 and 65
     * keys (the last on the other path) */
    const int32_t p0[1] = {0}, p63[1] = {63}, p64[1] = {64};
    const fcase few[] = {
        {128, 1, 4096, 8, 2, 1, RB_F32, RB_BF16, true, false, 50, 30.0f, 0, p100, true, false},
        {64, 1, 4096, 8, 8, 1, RB_F32, RB_F16, true, false, 20, 0.0f, 0, pmid, true, false},
        {64, 1, 4096, 32, 8, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, p0, true, false},
        {128, 1, 4096, 16, 4, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, p63, true, false},
        {128, 1, 4096, 16, 4, 1, RB_F32, RB_BF16, true, false, 0, 0.0f, 0, p64, true, false},
    };
    for (size_t i = 0; i < sizeof few / sizeof few[0]; i++) run_fast(c, g, rng, &few[i]);

    /* one decode launch shape (Tk fixed) at positions that need one block per
     * row, several, and all of them, in a row on the same backend: blocks of
     * a row merge through a device counter that the last one resets, so a
     * counter left behind would spoil the next call (its output would stay
     * NaN). Head groups: R = 1 (7B), 4 (Llama-3.2-1B: 2 heads a block), 3
     * (one head a block) and 16 (8 blocks of heads per kv group). */
    const int32_t sweep[] = {0, 31, 32, 63, 100, 255, 256, 257, 700, 1500, 2047, 4095, 5, 4000};
    const int64_t sw_heads[4][3] = {{32, 32, 128}, {32, 8, 64}, {6, 2, 96}, {16, 1, 64}};
    for (int hc2 = 0; hc2 < 4; hc2++)
        for (size_t pi = 0; pi < sizeof sweep / sizeof sweep[0]; pi++) {
            fcase f = {sw_heads[hc2][2], 1, 4096, sw_heads[hc2][0], sw_heads[hc2][1], 1, RB_F32,
                       (pi + hc2) % 2 ? RB_BF16 : RB_F16, true, false, 0, 0.0f, 0, &sweep[pi], true, false};
            if (hc2 == 2 && pi % 3 == 0) f.window = 300; /* a window that starts past 0 */
            run_fast(c, g, rng, &f);
        }

    /* unsorted positions of several sequences' queries (double reference) */
    const int32_t pscatter[3] = {4000, 17, 911};
    fcase sc = {96, 3, 4096, 8, 1, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, pscatter, true, false};
    run_fast(c, g, rng, &sc);
    for (int i = 0; i < 40; i++) posbuf[i] = (int32_t)((i * 7919 + 13) % 700);
    fcase sc2 = {128, 40, 701, 8, 2, 1, RB_F32, RB_F16, true, true, 300, 20.0f, 0, posbuf, false, false};
    run_fast(c, g, rng, &sc2);
    fcase sc3 = {64, 40, 701, 4, 4, 2, RB_F32, RB_BF16, true, false, 0, 0.0f, 0, posbuf, true, false};
    run_fast(c, g, rng, &sc3);
}

static void test_attention_16bit(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    const int64_t Ds[5] = {64, 80, 96, 128, 256}, Tqs[5] = {1, 7, 16, 100, 512};
    const int64_t heads[3][2] = {{2, 2}, {8, 2}, {8, 1}};
    int32_t posbuf[512];
    for (int di = 0; di < 5; di++)
        for (int ti = 0; ti < 5; ti++) {
            const int sel = (di * 5 + ti) % 6, hc = (di + ti) % 3;
            fcase f = {0};
            f.D = Ds[di];
            f.Tq = Tqs[ti];
            f.Tk = f.Tq + 37 + 2 * di + (ti == 0 ? 260 : 0); /* odd: never whole tiles */
            f.Hq = heads[hc][0];
            f.Hkv = heads[hc][1];
            f.B = (di + ti) % 4 == 3 ? 2 : 1;
            f.qt = ti == 1 && di == 2 ? RB_F16 : RB_F32;
            f.kvt = (di + ti) % 2 ? RB_BF16 : RB_F16;
            f.causal = sel != 3;
            f.q_pos0 = f.causal ? f.Tk - f.Tq : 3;
            f.window = sel == 1 || sel == 5 ? (int)(f.Tq / 2 + 29) : 0;
            f.softcap = sel == 2 || sel == 5 ? 8.0f : 0.0f;
            f.mask = sel == 3 || sel == 5;
            if (sel == 4 || sel == 5) { /* consecutive positions on the device */
                for (int64_t i = 0; i < f.Tq; i++) posbuf[i] = (int32_t)(f.q_pos0 + i);
                f.pos = posbuf;
            }
            run_fast(c, g, &rng, &f);
        }

    /* the decode sets on both decode kernels: the wide one, then att_decode.cuh's */
    decode_sets(c, g, &rng);
    const rb_gpu_tuning narrow = {.narrow_decode_att = true}, dflt = {0};
    assert_int_equal(rb_gpu_backend_tune(g, &narrow), RB_OK);
    decode_sets(c, g, &rng);
    assert_int_equal(rb_gpu_backend_tune(g, &dflt), RB_OK);
    /* long prefill with a window: whole-tile skipping on both sides */
    fcase lw = {128, 1000, 1000, 4, 2, 1, RB_F32, RB_F16, true, false, 333, 0.0f, 0, NULL, false, false};
    run_fast(c, g, &rng, &lw);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

/* kv_index over a pool of caches: k/v [D, Tk, Hkv, S] in the cache layout,
 * a batch of B items each naming its slice (one twice, one out of range:
 * no keys, zeros) with its own positions (q_pos [Tq, B]), on the GPU
 * against the CPU backend (whose kv_index is checked against a double
 * reference in tests/ops). One query a sequence (the batched decode step:
 * both decode kernels, early reads with keys_settled) and 16 (tensor
 * cores), f32 K/V (generic kernel). Bounds as the kernels'. */
static void kv_index_case(rb_backend *c, rb_backend *g, tu_rng *rng, int64_t D, int64_t Tq, int64_t Hq, int64_t Hkv,
                          rb_dtype kvt, int window, bool settled) {
    enum { S = 6, B = 5 };
    const int64_t Tk = 700;
    const int32_t idx[B] = {4, 0, 4, 7, 2};
    int32_t pos[B * 16];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Tq; i++) pos[b * Tq + i] = (int32_t)((b * 263 + i * 37 + 5) % Tk);
    pos[1 * Tq] = (int32_t)Tk - 1;
    pos[2 * Tq] = 0;
    const int64_t qne[4] = {D, Hq, Tq, B}, kne[4] = {D, Hkv, Tk, S}, dne[4] = {D, Hq, Tq, B};
    gp q = gp_make(c, g, rng, RB_F32, qne, GP_CONTIG, -2, 2);
    gp k = gp_make(c, g, rng, kvt, kne, GP_CONTIG, -1, 1);
    gp v = gp_make(c, g, rng, kvt, kne, GP_CONTIG, -1, 1);
    gp d = gp_make(c, g, rng, RB_F32, dne, GP_SLICE, -5, 5);
    swap12(&q);
    swap12(&k);
    swap12(&v);
    gp qp = gp_ids(c, g, pos, Tq, B), ki = gp_ids(c, g, idx, B, 1);
    poison_out(&d);
    rb_attn_params pg = {.scale = 1.0f / sqrtf((float)D), .causal = true, .window = window, .q_pos = &qp.g,
                         .kv_index = &ki.g, .keys_settled = settled};
    TU_OK(rb_attention(g, &d.g, &q.g, &k.g, &v.g, &pg));
    TU_OK(rb_backend_sync(g));
    rb_attn_params pc = pg;
    pc.q_pos = &qp.c;
    pc.kv_index = &ki.c;
    TU_OK(rb_attention(c, &d.c, &q.c, &k.c, &v.c, &pc));
    char name[128];
    snprintf(name, sizeof name, "kv_index D%lld Tq%lld H%lld/%lld %s window %d%s", (long long)D, (long long)Tq,
             (long long)Hq, (long long)Hkv, rb_dtype_name(kvt), window, settled ? " settled" : "");
    const bool tc = Tq >= 16 && kvt != RB_F32;
    const double tol = tc ? (kvt == RB_BF16 ? 1e-2 : 2e-3) : 2e-5;
    gp_expect_close(&d, tol, tc ? tol : 2e-6, name);
    double *out = gp_read(&d, 1);
    for (int64_t e = 0; e < D * Hq * Tq; e++) /* item 3 names slice 7 of 6: zeros */
        if (out[3 * D * Hq * Tq + e] != 0.0) fail_msg("%s: item without keys gave %g", name, out[3 * D * Hq * Tq + e]);
    free(out);
    print_message("%s: matches the CPU\n", name);
    gp_free(&qp);
    gp_free(&ki);
    gp_free(&q);
    gp_free(&k);
    gp_free(&v);
    gp_free(&d);
}

static void test_attention_kv_index(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 4343);
    const rb_gpu_tuning narrow = {.narrow_decode_att = true}, dflt = {0};
    for (int pass = 0; pass < 2; pass++) { /* the wide decode kernel, then att_decode.cuh */
        kv_index_case(c, g, &rng, 128, 1, 32, 8, RB_F16, 0, true);
        kv_index_case(c, g, &rng, 64, 1, 32, 8, RB_BF16, 0, false);
        kv_index_case(c, g, &rng, 128, 1, 8, 8, RB_F16, 200, true);
        kv_index_case(c, g, &rng, 80, 1, 4, 1, RB_F16, 0, true);
        assert_int_equal(rb_gpu_backend_tune(g, pass ? &dflt : &narrow), RB_OK);
    }
    kv_index_case(c, g, &rng, 64, 16, 8, 2, RB_F16, 0, false);
    kv_index_case(c, g, &rng, 128, 16, 4, 4, RB_BF16, 100, false);
    kv_index_case(c, g, &rng, 64, 2, 4, 2, RB_F32, 0, false);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

/* Attention sinks (gpt-oss) in every kernel the dispatcher chooses, with
 * and without a window, causal or not, q_pos0 or device positions: the
 * generic kernel (f32 K/V; head dim 16 as the tiny gpt-oss model; key
 * splits merged by k_att_merge; a query that sees nothing), the tensor-core
 * kernel (Tq >= 16, its splits too), both decode kernels (wide for D = 64 /
 * 128, att_decode.cuh for 80 / 96 / 256 and, tuned to narrow_decode_att, all
 * of them; in-kernel merges of key splits; the keys_settled launches and
 * their short path through run_settled). Head 0's sink is far above every
 * score (its output ~0), head 1's far below. Bounds as the kernels'. */
static void sink_sets(rb_backend *c, rb_backend *g, tu_rng *rng) {
    const int32_t p0[1] = {0}, p40[1] = {40}, p700[1] = {700}, plast[1] = {4095};
    int32_t pseq[7];
    for (int i = 0; i < 7; i++) pseq[i] = 1200 + i;
    const fcase cs[] = {
        /* decode: one query over a 4096-key cache, rows past it NaN */
        {64, 1, 4096, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, p700, true, true},
        {64, 1, 4096, 64, 8, 1, RB_F32, RB_BF16, true, false, 128, 0.0f, 0, plast, false, true},
        {128, 1, 4096, 8, 8, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 0, p40, true, true},
        {128, 1, 4096, 32, 8, 1, RB_F32, RB_BF16, true, false, 0, 0.0f, 0, plast, false, true},
        {80, 1, 4096, 4, 1, 1, RB_F32, RB_F16, true, false, 300, 0.0f, 0, p700, true, true},
        {96, 1, 4096, 6, 2, 1, RB_F32, RB_BF16, true, false, 0, 0.0f, 0, p0, true, true},
        {256, 1, 4096, 8, 4, 1, RB_F32, RB_F16, true, false, 0, 50.0f, 0, plast, false, true},
        {64, 7, 4096, 8, 2, 1, RB_F32, RB_F16, true, false, 64, 0.0f, 0, pseq, true, true},
        /* few queries in q_pos0 form, a batch of two, not causal with a mask */
        {64, 3, 301, 4, 2, 2, RB_F32, RB_F16, true, false, 0, 0.0f, 298, NULL, false, true},
        {128, 5, 77, 4, 4, 1, RB_F32, RB_BF16, false, true, 0, 0.0f, 3, NULL, false, true},
        /* tensor cores: prefill with and without a window, and few tiles (key splits) */
        {64, 100, 137, 8, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 37, NULL, false, true},
        {64, 64, 64, 8, 8, 1, RB_F32, RB_BF16, true, false, 8, 0.0f, 0, NULL, false, true},
        {128, 16, 2000, 2, 2, 1, RB_F32, RB_F16, true, false, 0, 0.0f, 1984, NULL, false, true},
        {80, 33, 50, 4, 2, 1, RB_F32, RB_F16, false, true, 0, 0.0f, 0, NULL, false, true},
        /* generic (f32 K/V): gpt-oss's head dim 16 with its window of 8, key splits, nothing visible */
        {16, 24, 24, 4, 2, 1, RB_F32, RB_F32, true, false, 8, 0.0f, 0, NULL, false, true},
        {16, 24, 24, 4, 2, 1, RB_F32, RB_F32, true, false, 0, 0.0f, 0, NULL, false, true},
        {64, 1, 3000, 4, 1, 1, RB_F32, RB_F32, true, false, 0, 0.0f, 2999, NULL, false, true},
        {32, 4, 30, 2, 1, 1, RB_F32, RB_F32, true, false, 10, 0.0f, 50, NULL, false, true},
        {48, 9, 50, 3, 1, 1, RB_F32, RB_F32, false, true, 0, 20.0f, 41, NULL, false, true},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_fast(c, g, rng, &cs[i]);
    /* device positions over a gpt-oss-sized cache (the fixed decode form) */
    const int32_t p5[1] = {5}, p100[1] = {100};
    fcase gd = {16, 1, 128, 4, 2, 1, RB_F32, RB_F32, true, false, 8, 0.0f, 0, p100, true, true};
    run_fast(c, g, rng, &gd);
    gd.pos = p5;
    gd.window = 0;
    run_fast(c, g, rng, &gd);
}

static void test_attention_sinks(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 4545);
    sink_sets(c, g, &rng);
    const rb_gpu_tuning narrow = {.narrow_decode_att = true}, dflt = {0};
    TU_OK(rb_gpu_backend_tune(g, &narrow));
    sink_sets(c, g, &rng);
    TU_OK(rb_gpu_backend_tune(g, &dflt));
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

/* A view of x's parent: dtype of x, extents ne, byte strides nb, at offs. */
static rb_tensor view_of(const rb_tensor *x, const int64_t ne[4], const size_t nb[4], size_t offs) {
    rb_tensor t = *x;
    for (int i = 0; i < 4; i++) {
        t.ne[i] = ne[i];
        t.nb[i] = nb[i];
    }
    t.offs = x->offs + offs;
    return t;
}

/* keys_settled as a model's fixed decode step uses it: a fused q8_0 product
 * (the qkv projection, ~100 MB of weights, so it runs long) writes the k and
 * v rows of the new position into the cache slot of that position (whose
 * old contents are NaN), and decode attention over the cache follows at
 * once; the attention kernel starts during the product and reads the rows
 * below the position early (41 keys: the short path). Three settled launches
 * must equal each other bit for bit and the launch without keys_settled
 * within 1e-5 of its largest output (another summation order), and the CPU
 * backend within 2e-3 rel L2
 * (the k/v rows are rounded to f16 in the cache: a product a few ulps off
 * moves one by 4.9e-4 of itself). A kernel that read the new row before its
 * dependency wait sees NaN for the heads written last (checked: with the
 * early loads reaching the position, this test failed). */
static void test_attention_settled(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 4343);
    const int64_t D = 128, H = 8, K = 24576, N = 3 * H * D, S = 64, KV = 2 * H * D;
    const int32_t pos = 40;
    const int64_t ane[4] = {K, N, 1, 1}, xne[4] = {K, 1, 1, 1}, yne[4] = {N, 1, 1, 1}, cne[4] = {KV, S, 1, 1},
                  one[4] = {D, H, 1, 1};
    gp a = gp_make(c, g, &rng, RB_Q8_0, ane, GP_CONTIG, -1, 1);
    TU_OK(rb_buffer_set_constant(a.gb)); /* the product may start before the ops ahead end, as in a model */
    gp x = gp_make(c, g, &rng, RB_F32, xne, GP_CONTIG, -1, 1);
    gp y = gp_make(c, g, &rng, RB_F32, yne, GP_CONTIG, 0, 1);
    gp cache = gp_make(c, g, &rng, RB_F16, cne, GP_CONTIG, -1, 1);
    gp out = gp_make(c, g, &rng, RB_F32, one, GP_CONTIG, 0, 1);
    gp ti = gp_make(c, g, &rng, RB_F32, xne, GP_CONTIG, 0, 1);
    gp to = gp_make(c, g, &rng, RB_F32, yne, GP_CONTIG, 0, 1);
    gp qp = gp_ids(c, g, &pos, 1, 1);
    /* slot pos of the cache NaN on both sides: the product must write it */
    const uint16_t nanbits = 0x7e00;
    for (int64_t e = 0; e < KV; e++) memcpy(cache.orig + cache.c.offs + (size_t)(pos * KV + e) * 2, &nanbits, 2);
    /* q: the product's first H D rows as [D, 1, H]; k, v: the cache as [D, S, H] */
    const int64_t qne[4] = {D, 1, H, 1}, kne[4] = {D, S, H, 1};
    const size_t qnb[4] = {4, (size_t)N * 4, (size_t)D * 4, (size_t)N * 4},
                 knb[4] = {2, (size_t)KV * 2, (size_t)D * 2, (size_t)(KV * S) * 2};
    double *first = NULL, *sfirst = NULL, big = 0.0;
    for (int run = 0; run < 5; run++) {
        const bool cpu = run == 4, settled = run >= 1 && run <= 3;
        rb_backend *be = cpu ? c : g;
        TU_OK(rb_buffer_set(cpu ? cache.cb : cache.gb, 0, cache.orig, cache.size)); /* slot pos NaN again */
        if (!cpu) poison_out(&out);
        rb_tensor ac = cpu ? a.c : a.g, xc = cpu ? x.c : x.g, yc = cpu ? y.c : y.g, cc = cpu ? cache.c : cache.g;
        rb_tensor oc = cpu ? out.c : out.g, tic = cpu ? ti.c : ti.g, toc = cpu ? to.c : to.g, pc = cpu ? qp.c : qp.g;
        rb_matmul_fusion f = {.store_dst = &cc, .store_ids = &pc, .store_row0 = H * D, .tmp_in = &tic, .tmp_out = &toc};
        rb_tensor qv = view_of(&yc, qne, qnb, 0), kv = view_of(&cc, kne, knb, 0),
                  vv = view_of(&cc, kne, knb, (size_t)(H * D) * 2);
        rb_attn_params p = {.scale = 0.088388f, .causal = true, .q_pos = &pc, .keys_settled = settled};
        if (!cpu) TU_OK(rb_backend_sync(g));
        TU_OK(rb_matmul_fused(be, &yc, &ac, &xc, &f));
        TU_OK(rb_attention(be, &oc, &qv, &kv, &vv, &p));
        TU_OK(rb_backend_sync(be));
        double *got = gp_read(&out, cpu ? 0 : 1), num = 0, den = 0;
        for (int64_t e = 0; e < D * H; e++) {
            if (!isfinite(got[e])) fail_msg("settled run %d: output %lld is %g", run, (long long)e, got[e]);
            if (!first) {
                big = fmax(big, fabs(got[e]));
                continue;
            }
            const double want = first[e];
            num += (got[e] - want) * (got[e] - want);
            den += want * want;
            if (settled && !(fabs(got[e] - want) <= 1e-5 * big))
                fail_msg("settled run %d: output %lld = %.9g, %.9g without keys_settled", run, (long long)e, got[e],
                         want);
            if (settled && sfirst && !(got[e] == sfirst[e]))
                fail_msg("settled run %d: output %lld = %.9g, %.9g in the first settled run", run, (long long)e,
                         got[e], sfirst[e]);
        }
        if (cpu && !(sqrt(num / den) <= 2e-3))
            fail_msg("settled: rel L2 against the CPU backend %.3g > 2e-3", sqrt(num / den));
        if (!first) first = got;
        else if (settled && !sfirst) sfirst = got;
        else free(got);
    }
    free(first);
    free(sfirst);
    gp_free(&a);
    gp_free(&x);
    gp_free(&y);
    gp_free(&cache);
    gp_free(&out);
    gp_free(&ti);
    gp_free(&to);
    gp_free(&qp);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

/* ---- the plain case: att_fa.cuh on CUDA sm_80+ ----
 * Non-causal attention without mask, window, soft-capping, sinks or device
 * positions (the diffusion networks' self- and cross-attention) goes to
 * att_fa.cuh on CUDA; everything else stays on att_tc.cuh. Each case runs
 * on the default choice and with the tuning's no_att_fa (att_tc.cuh), both
 * against the CPU backend with the tensor-core bounds of check_out (rel L2
 * and max |diff| <= 2e-3 f16 / 1e-2 bf16; outputs are averages of values in
 * [-1, 1], so an f16 or bf16 dst adds at most an ulp of such values on each
 * side). Which kernel ran shows in the bits: att_fa.cuh rounds Q scale
 * log2(e) where att_tc.cuh rounds Q scale, so a plain case on CUDA must
 * differ from the no_att_fa run somewhere, and a case with any excluded
 * feature (or on ROCm, or a head dim att_fa.cuh lacks) must equal it bit
 * for bit. Shapes: every head dim of att_fa.cuh in f16 and bf16, Tq and Tk
 * off the tiles (SD3's 4,429 tokens, 77 / 154 text tokens, fewer keys than a
 * tile), batches, several heads, grouped heads (R = 4), key splits (few
 * row tiles over many keys), f32 / f16 / bf16 q and dst. */
enum { PC_PLAIN, PC_CAUSAL, PC_MASK, PC_SOFTCAP, PC_WINDOW, PC_SINKS, PC_QPOS };

typedef struct pcase {
    int64_t D, Tq, Tk, Hq, Hkv, B;
    rb_dtype qt, kvt, dt;
    int excl; /* PC_PLAIN, or the one feature that keeps the case on att_tc.cuh */
} pcase;

static bool plain_kernel_here(rb_backend *g) {
    rb_device_info info;
    int sm = 0;
    if (rb_backend_kind(g) != RB_DEVICE_CUDA || rb_backend_device_info(g, &info) != RB_OK) return false;
    return sscanf(info.features, "sm_%d", &sm) == 1 && sm >= 80;
}

static void run_plain(rb_backend *c, rb_backend *g, tu_rng *rng, const pcase *f, bool fa_here) {
    static const char *excl_name[] = {"", " causal", " mask", " softcap", " window", " sinks", " q_pos"};
    char name[160];
    snprintf(name, sizeof name, "plain D%lld Tq%lld Tk%lld H%lld/%lld B%lld q %s kv %s dst %s%s", (long long)f->D,
             (long long)f->Tq, (long long)f->Tk, (long long)f->Hq, (long long)f->Hkv, (long long)f->B,
             rb_dtype_name(f->qt), rb_dtype_name(f->kvt), rb_dtype_name(f->dt), excl_name[f->excl]);
    const int64_t qne[4] = {f->D, f->Hq, f->Tq, f->B}, kne[4] = {f->D, f->Hkv, f->Tk, f->B},
                  dne[4] = {f->D, f->Hq, f->Tq, f->B}, mne[4] = {f->Tk, f->Tq, 1, 1}, sne[4] = {f->Hq, 1, 1, 1};
    gp q = gp_make(c, g, rng, f->qt, qne, GP_CONTIG, -2, 2);
    gp k = gp_make(c, g, rng, f->kvt, kne, GP_CONTIG, -1, 1);
    gp v = gp_make(c, g, rng, f->kvt, kne, GP_CONTIG, -1, 1);
    gp d = gp_make(c, g, rng, f->dt, dne, GP_SLICE, -5, 5);
    gp m = gp_make(c, g, rng, RB_F32, mne, GP_CONTIG, -3, 1);
    gp sk = gp_make(c, g, rng, RB_F32, sne, GP_CONTIG, -2, 4);
    swap12(&q);
    swap12(&k);
    swap12(&v);
    const bool causal = f->excl == PC_CAUSAL || f->excl == PC_QPOS;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)f->Tq);
    assert_non_null(pos);
    const int64_t pos0 = causal && f->Tk > f->Tq ? f->Tk - f->Tq : 0;
    for (int64_t i = 0; i < f->Tq; i++) pos[i] = (int32_t)(pos0 + i);
    gp qp = gp_ids(c, g, pos, f->Tq, 1);
    rb_attn_params pg = {.scale = 1.0f / sqrtf((float)f->D), .causal = causal, .q_pos0 = pos0};
    if (f->excl == PC_MASK) pg.mask = &m.g;
    if (f->excl == PC_SOFTCAP) pg.softcap = 8.0f;
    if (f->excl == PC_WINDOW) pg.window = (int)(f->Tq / 2 + 29);
    if (f->excl == PC_SINKS) pg.sinks = &sk.g;
    if (f->excl == PC_QPOS) {
        pg.q_pos = &qp.g;
        pg.q_pos0 = 0;
    }
    rb_attn_params pc = pg; /* the CPU in q_pos0 form */
    pc.q_pos = NULL;
    pc.q_pos0 = pos0;
    pc.mask = pg.mask ? &m.c : NULL;
    pc.sinks = pg.sinks ? &sk.c : NULL;
    TU_OK(rb_attention(c, &d.c, &q.c, &k.c, &v.c, &pc));
    double *ref = gp_read(&d, 0), *got[2];
    /* bounds of the tensor-core kernels (check_out) */
    fcase fb = {0};
    fb.D = f->D;
    fb.Tq = f->Tq;
    fb.kvt = f->kvt;
    const rb_gpu_tuning tunes[2] = {{0}, {.no_att_fa = true}};
    for (int run = 0; run < 2; run++) {
        TU_OK(rb_gpu_backend_tune(g, &tunes[run]));
        poison_out(&d);
        TU_OK(rb_attention(g, &d.g, &q.g, &k.g, &v.g, &pg));
        TU_OK(rb_backend_sync(g));
        check_out(&fb, &d, ref, name, run ? "cpu (att_tc)" : "cpu");
        gp_expect_close(&d, 1e300, 1e300, name); /* nothing written around the view */
        got[run] = gp_read(&d, 1);
    }
    TU_OK(rb_gpu_backend_tune(g, &tunes[0]));
    const int64_t n = rb_tensor_nelements(&d.g);
    int64_t ndiff = 0;
    for (int64_t e = 0; e < n; e++) ndiff += got[0][e] != got[1][e];
    const bool fa = fa_here && f->excl == PC_PLAIN && (f->D == 40 || f->D == 64 || f->D == 80 || f->D == 96 ||
                                                       f->D == 128 || f->D == 160);
    if (fa && ndiff == 0) fail_msg("%s: the same bits as att_tc.cuh: att_fa.cuh did not run", name);
    if (!fa && ndiff != 0)
        fail_msg("%s: %lld of %lld elements differ from att_tc.cuh's, which should have run", name,
                 (long long)ndiff, (long long)n);
    print_message("%s: %s (%lld of %lld elements differ from att_tc.cuh)\n", name, fa ? "att_fa" : "att_tc",
                  (long long)ndiff, (long long)n);
    free(ref);
    free(got[0]);
    free(got[1]);
    free(pos);
    gp_free(&qp);
    gp_free(&q);
    gp_free(&k);
    gp_free(&v);
    gp_free(&d);
    gp_free(&m);
    gp_free(&sk);
}

static void test_attention_plain(void **state) {
    (void)state;
    rb_backend *g = gp_gpu();
    GP_NEED_GPU(g);
    rb_backend *c = gp_cpu();
    tu_rng rng;
    tu_rng_seed(&rng, 5151);
    const bool fa_here = plain_kernel_here(g);
    print_message("att_fa.cuh %s on this backend\n", fa_here ? "expected" : "not expected");
    const rb_dtype F32 = RB_F32, F16 = RB_F16, BF16 = RB_BF16;
    const pcase cs[] = {
        /* SD3-medium's joint attention (4,429 tokens, D = 64), fewer heads */
        {64, 4429, 4429, 2, 2, 1, F16, F16, F16, PC_PLAIN},
        /* SD1.5: 4096 image tokens at D = 40 against 77 text tokens, 1024 at 80, 256 and 64 at 160 */
        {40, 4096, 77, 8, 8, 2, F32, F16, F32, PC_PLAIN},
        {40, 1000, 154, 5, 5, 1, F32, BF16, BF16, PC_PLAIN},
        {80, 1000, 1000, 4, 4, 2, F32, BF16, F32, PC_PLAIN},
        {80, 129, 65, 6, 3, 3, F16, F16, F16, PC_PLAIN},
        {160, 256, 256, 8, 8, 2, BF16, BF16, BF16, PC_PLAIN},
        {160, 64, 77, 8, 8, 2, F32, F16, F32, PC_PLAIN},
        /* SDXL / SD2: D = 64 against text tokens; fewer keys than a tile */
        {64, 4096, 77, 10, 10, 2, F16, F16, F16, PC_PLAIN},
        {64, 16, 7, 3, 3, 2, F32, BF16, F32, PC_PLAIN},
        /* grouped heads (R = 4), and few row tiles over many keys (key splits) */
        {128, 300, 1000, 8, 2, 1, F32, F16, F32, PC_PLAIN},
        {128, 37, 2000, 4, 4, 1, F32, BF16, F32, PC_PLAIN},
        {96, 100, 3000, 2, 2, 1, F32, F16, F32, PC_PLAIN},
        {96, 200, 333, 4, 1, 2, F32, BF16, BF16, PC_PLAIN},
        /* what stays on att_tc.cuh */
        {64, 200, 200, 4, 4, 1, F32, F16, F32, PC_CAUSAL},
        {40, 100, 77, 8, 8, 1, F32, F16, F32, PC_MASK},
        {64, 100, 300, 4, 4, 1, F32, BF16, F32, PC_SOFTCAP},
        {80, 100, 300, 4, 4, 1, F32, F16, F32, PC_WINDOW},
        {64, 100, 137, 4, 4, 1, F32, F16, F32, PC_SINKS},
        {128, 40, 300, 4, 2, 1, F32, F16, F32, PC_QPOS},
        {256, 50, 100, 4, 4, 1, F32, F16, F32, PC_PLAIN},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_plain(c, g, &rng, &cs[i], fa_here);
    rb_backend_destroy(c);
    rb_backend_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_16bit),
                                       cmocka_unit_test(test_attention_settled),
                                       cmocka_unit_test(test_attention_sinks),
                                       cmocka_unit_test(test_attention_kv_index),
                                       cmocka_unit_test(test_attention_plain)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
