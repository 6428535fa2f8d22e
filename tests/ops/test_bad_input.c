/* Validation of the op front-ends, family by family (elementwise,
 * reductions/indexing/sorting, the fused ops): shape mismatches,
 * wrong dtypes, tensors from another backend, views reaching outside their
 * buffer, missing buffers, bad enum values and parameters. Every rejected
 * call must return the stated code, name the op in rb_backend_last_error,
 * and leave the destination untouched. */
#include "ref_ops.h"

#include <math.h>
#include <string.h>

typedef struct fx {
    rb_backend *be, *other;
    tu_rng rng;
} fx;

static void expect_fail(rb_backend *be, rb_status got, rb_status want, const char *op, const char *needle,
                        const tt *dst) {
    if (got != want)
        fail_msg("%s: got %s, want %s (%s)", op, rb_status_str(got), rb_status_str(want), rb_backend_last_error(be));
    const char *msg = rb_backend_last_error(be);
    if (!strstr(msg, op)) fail_msg("message '%s' does not name %s", msg, op);
    if (needle && !strstr(msg, needle)) fail_msg("message '%s' lacks '%s'", msg, needle);
    if (dst) assert_true(tf_unchanged(dst));
}

static void test_elementwise_family(void **state) {
    (void)state;
    fx f = {tf_backend(&tf_cfgs[1]), tf_backend(&tf_cfgs[0]), {{0}}};
    tu_rng_seed(&f.rng, 21000);
    const int64_t ne[4] = {7, 5, 3, 1}, ne2[4] = {7, 4, 3, 1}, nb[4] = {7, 2, 3, 1};
    tt d = tf_make(f.be, &f.rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt a = tf_make(f.be, &f.rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt wrong = tf_make(f.be, &f.rng, RB_F32, ne2, TF_CONTIG, -1, 1);
    tt nob = tf_make(f.be, &f.rng, RB_F32, nb, TF_CONTIG, -1, 1);
    tt ints = tf_make(f.be, &f.rng, RB_I32, ne, TF_CONTIG, -1, 1);
    tt q = tf_make(f.be, &f.rng, RB_F64, ne, TF_CONTIG, -1, 1);
    tt foreign = tf_make(f.other, &f.rng, RB_F32, ne, TF_CONTIG, -1, 1);

    expect_fail(f.be, rb_unary(f.be, RB_UNARY_EXP, &d.t, &wrong.t), RB_E_INVALID, "rb_unary(exp)", "shape mismatch", &d);
    expect_fail(f.be, rb_unary(f.be, RB_UNARY_COUNT_, &d.t, &a.t), RB_E_INVALID, "rb_unary", "unknown", &d);
    expect_fail(f.be, rb_unary(f.be, RB_UNARY_EXP, &d.t, &ints.t), RB_E_INVALID, "rb_unary(exp)", "i32", &d);
    expect_fail(f.be, rb_unary(f.be, RB_UNARY_EXP, &d.t, &foreign.t), RB_E_INVALID, "rb_unary(exp)", "backend", &d);
    expect_fail(f.be, rb_affine(f.be, &d.t, &q.t, 1, 0), RB_E_INVALID, "rb_affine", "f64", &d);
    expect_fail(f.be, rb_binary(f.be, RB_BINARY_ADD, &d.t, &a.t, &nob.t), RB_E_INVALID, "rb_binary(add)",
                "cannot broadcast", &d);
    expect_fail(f.be, rb_binary(f.be, RB_BINARY_ADD, &d.t, &a.t, NULL), RB_E_INVALID, "rb_binary(add)", "NULL", &d);
    expect_fail(f.be, rb_where(f.be, &d.t, &q.t, &a.t, &a.t), RB_E_INVALID, "rb_where", "cond", &d);
    expect_fail(f.be, rb_fill(f.be, &q.t, 1), RB_E_INVALID, "rb_fill", "f64", &q);

    /* a view whose strides reach past its buffer */
    rb_tensor bad = a.t;
    bad.nb[2] *= 2;
    expect_fail(f.be, rb_unary(f.be, RB_UNARY_NEG, &d.t, &bad), RB_E_RANGE, "rb_unary(neg)", "outside", &d);
    bad = a.t;
    bad.offs = rb_buffer_size(a.buf) - 4;
    expect_fail(f.be, rb_affine(f.be, &bad, &d.t, 1, 0), RB_E_RANGE, "rb_affine", "outside", &a);
    bad = a.t;
    bad.offs = SIZE_MAX - 8; /* overflow guard */
    expect_fail(f.be, rb_affine(f.be, &d.t, &bad, 1, 0), RB_E_RANGE, "rb_affine", "outside", &d);
    bad = a.t;
    bad.buf = NULL;
    expect_fail(f.be, rb_affine(f.be, &d.t, &bad, 1, 0), RB_E_INVALID, "rb_affine", "no buffer", &d);
    bad = a.t;
    bad.dtype = (rb_dtype)5;
    expect_fail(f.be, rb_affine(f.be, &d.t, &bad, 1, 0), RB_E_INVALID, "rb_affine", "invalid dtype", &d);
    /* cast */
    tt q4 = tf_make(f.be, &f.rng, RB_Q4_0, (const int64_t[4]){32, 5, 3, 1}, TF_CONTIG, -1, 1);
    tt q8 = tf_make(f.be, &f.rng, RB_Q8_0, (const int64_t[4]){32, 5, 3, 1}, TF_CONTIG, -1, 1);
    tt i32b = tf_make(f.be, &f.rng, RB_I32, (const int64_t[4]){32, 5, 3, 1}, TF_CONTIG, -1, 1);
    expect_fail(f.be, rb_cast(f.be, &d.t, &wrong.t), RB_E_INVALID, "rb_cast", "shape mismatch", &d);
    expect_fail(f.be, rb_cast(f.be, &q8.t, &q4.t), RB_E_UNSUPPORTED, "rb_cast", "quantized", &q8);
    expect_fail(f.be, rb_cast(f.be, &i32b.t, &q4.t), RB_E_INVALID, "rb_cast", "dequantizing", &i32b);
    expect_fail(f.be, rb_cast(f.be, &q4.t, &i32b.t), RB_E_INVALID, "rb_cast", "quantizing", &q4);
    rb_tensor qs = q4.t;
    qs.nb[0] = 20; /* quantized rows must be contiguous */
    qs.ne[0] = 32;
    expect_fail(f.be, rb_cast(f.be, &i32b.t, &qs), RB_E_INVALID, "rb_cast", "contiguous", &i32b);
    assert_int_equal(rb_fill(NULL, &d.t, 0), RB_E_INVALID);

    tf_free(&q4);
    tf_free(&q8);
    tf_free(&i32b);
    tf_free(&d);
    tf_free(&a);
    tf_free(&wrong);
    tf_free(&nob);
    tf_free(&ints);
    tf_free(&q);
    tf_free(&foreign);
    rb_backend_destroy(f.be);
    rb_backend_destroy(f.other);
}

static void test_reduce_index_sort_family(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]), *other = tf_backend(&tf_cfgs[0]);
    tu_rng rng;
    tu_rng_seed(&rng, 22000);
    const int64_t ne[4] = {9, 4, 2, 1}, red[4] = {1, 4, 2, 1}, redbad[4] = {1, 4, 1, 1}, wne[4] = {9, 1, 1, 1};
    tt s = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt r = tf_make(be, &rng, RB_F32, red, TF_CONTIG, -1, 1);
    tt rb = tf_make(be, &rng, RB_F32, redbad, TF_CONTIG, -1, 1);
    tt w8 = tf_make(be, &rng, RB_F32, (const int64_t[4]){8, 1, 1, 1}, TF_CONTIG, -1, 1);
    tt w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, -1, 1);
    tt wi = tf_make(be, &rng, RB_I32, wne, TF_CONTIG, -1, 1);
    tt mask_bad = tf_make(be, &rng, RB_F32, (const int64_t[4]){8, 4, 1, 1}, TF_CONTIG, -1, 1);
    tt mask_bf = tf_make(be, &rng, RB_BF16, (const int64_t[4]){9, 4, 1, 1}, TF_CONTIG, -1, 1);
    tt foreign = tf_make(other, &rng, RB_F32, ne, TF_CONTIG, -1, 1);

    expect_fail(be, rb_reduce(be, RB_REDUCE_SUM, &rb.t, &s.t), RB_E_INVALID, "rb_reduce", "must be", &rb);
    expect_fail(be, rb_reduce(be, RB_REDUCE_ARGMAX, &r.t, &s.t), RB_E_INVALID, "rb_reduce", "i32", &r);
    expect_fail(be, rb_reduce(be, RB_REDUCE_COUNT_, &r.t, &s.t), RB_E_INVALID, "rb_reduce", "unknown", &r);
    expect_fail(be, rb_softmax(be, &d.t, &s.t, &mask_bad.t, 1), RB_E_INVALID, "rb_softmax", "ne[0]", &d);
    expect_fail(be, rb_softmax(be, &d.t, &s.t, &mask_bf.t, 1), RB_E_INVALID, "rb_softmax", "bf16", &d);
    expect_fail(be, rb_softmax(be, &d.t, &s.t, NULL, NAN), RB_E_INVALID, "rb_softmax", "scale", &d);
    expect_fail(be, rb_rms_norm(be, &d.t, &s.t, &w8.t, 1e-5f), RB_E_INVALID, "rb_rms_norm", "[9]", &d);
    expect_fail(be, rb_rms_norm(be, &d.t, &foreign.t, NULL, 1e-5f), RB_E_INVALID, "rb_rms_norm", "backend", &d);
    expect_fail(be, rb_rms_norm(be, &d.t, &s.t, NULL, -1.0f), RB_E_INVALID, "rb_rms_norm", "eps", &d);
    expect_fail(be, rb_layer_norm(be, &d.t, &s.t, &w.t, &wi.t, 1e-5f), RB_E_INVALID, "rb_layer_norm", "i32", &d);
    expect_fail(be, rb_group_norm(be, &d.t, &s.t, 3, NULL, NULL, 1e-5f), RB_E_INVALID, "rb_group_norm", "n_groups",
                &d);
    expect_fail(be, rb_group_norm(be, &d.t, &s.t, 0, NULL, NULL, 1e-5f), RB_E_INVALID, "rb_group_norm", "n_groups",
                &d);

    /* indexing */
    tt tab = tf_make(be, &rng, RB_F16, (const int64_t[4]){9, 20, 1, 1}, TF_CONTIG, -1, 1);
    tt ids = tf_make(be, &rng, RB_I32, (const int64_t[4]){4, 1, 1, 1}, TF_CONTIG, 0, 20);
    tt idsf = tf_make(be, &rng, RB_F32, (const int64_t[4]){4, 1, 1, 1}, TF_CONTIG, 0, 20);
    tt gd = tf_make(be, &rng, RB_F32, (const int64_t[4]){9, 4, 1, 1}, TF_CONTIG, -1, 1);
    tt gdbad = tf_make(be, &rng, RB_F32, (const int64_t[4]){9, 5, 1, 1}, TF_CONTIG, -1, 1);
    tt gdi = tf_make(be, &rng, RB_I32, (const int64_t[4]){9, 4, 1, 1}, TF_CONTIG, -1, 1);
    TU_OK(rb_get_rows(be, &gd.t, &tab.t, &ids.t));
    expect_fail(be, rb_get_rows(be, &gdbad.t, &tab.t, &ids.t), RB_E_INVALID, "rb_get_rows", "must be", &gdbad);
    expect_fail(be, rb_get_rows(be, &gd.t, &tab.t, &idsf.t), RB_E_INVALID, "rb_get_rows", "expected i32", NULL);
    expect_fail(be, rb_get_rows(be, &gdi.t, &tab.t, &ids.t), RB_E_INVALID, "rb_get_rows", "i32", &gdi);
    expect_fail(be, rb_index_select(be, &gd.t, &tab.t, &ids.t, 4), RB_E_INVALID, "rb_index_select", "dim", NULL);
    expect_fail(be, rb_index_select(be, &gdbad.t, &tab.t, &ids.t, 1), RB_E_INVALID, "rb_index_select", "ne[1]",
                &gdbad);
    expect_fail(be, rb_set_rows(be, &tab.t, &gdbad.t, &ids.t), RB_E_INVALID, "rb_set_rows", "rows", &tab);
    expect_fail(be, rb_set_rows(be, &tab.t, &gdi.t, &ids.t), RB_E_INVALID, "rb_set_rows", "i32", &tab);

    /* sorting */
    tt idx = tf_make(be, &rng, RB_I32, ne, TF_CONTIG, 0, 1);
    expect_fail(be, rb_argsort(be, &d.t, &s.t, false), RB_E_INVALID, "rb_argsort", "i32", &d);
    expect_fail(be, rb_argsort(be, &gdi.t, &s.t, false), RB_E_INVALID, "rb_argsort", "shape", &gdi);
    TU_OK(rb_argsort(be, &idx.t, &s.t, true));

    /* matmul shape checks (front-end only) */
    tt ma = tf_make(be, &rng, RB_F32, (const int64_t[4]){9, 6, 1, 1}, TF_CONTIG, -1, 1);
    tt mdbad = tf_make(be, &rng, RB_F32, (const int64_t[4]){5, 4, 2, 1}, TF_CONTIG, -1, 1);
    expect_fail(be, rb_matmul(be, &mdbad.t, &ma.t, &s.t), RB_E_INVALID, "rb_matmul", "must be", &mdbad);
    expect_fail(be, rb_matmul(be, &mdbad.t, &w8.t, &s.t), RB_E_INVALID, "rb_matmul", "inner", &mdbad);

    tf_free(&ma);
    tf_free(&mdbad);
    tf_free(&idx);
    tf_free(&tab);
    tf_free(&ids);
    tf_free(&idsf);
    tf_free(&gd);
    tf_free(&gdbad);
    tf_free(&gdi);
    tf_free(&s);
    tf_free(&d);
    tf_free(&r);
    tf_free(&rb);
    tf_free(&w8);
    tf_free(&w);
    tf_free(&wi);
    tf_free(&mask_bad);
    tf_free(&mask_bf);
    tf_free(&foreign);
    rb_backend_destroy(be);
    rb_backend_destroy(other);
}

/* rb_glu (float dtypes) and rb_add_rms_norm (f32 only): equal shapes, gate activations only,
 * and h must not overlap the x it normalises. */
static void test_fused_family(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]), *other = tf_backend(&tf_cfgs[0]);
    tu_rng rng;
    tu_rng_seed(&rng, 23000);
    const int64_t ne[4] = {9, 4, 2, 1}, ne2[4] = {9, 3, 2, 1}, wne[4] = {9, 1, 1, 1};
    tt d = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt g = tf_make(be, &rng, RB_F32, ne, TF_PERM, -1, 1);
    tt u = tf_make(be, &rng, RB_F32, ne, TF_SLICE, -1, 1);
    tt wrong = tf_make(be, &rng, RB_F32, ne2, TF_CONTIG, -1, 1);
    tt h16 = tf_make(be, &rng, RB_F16, ne, TF_CONTIG, -1, 1);
    tt b16 = tf_make(be, &rng, RB_BF16, ne, TF_CONTIG, -1, 1);
    tt foreign = tf_make(other, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, 0.5f, 1.5f);
    tt w8 = tf_make(be, &rng, RB_F32, (const int64_t[4]){8, 1, 1, 1}, TF_CONTIG, -1, 1);
    tt wi = tf_make(be, &rng, RB_I32, wne, TF_CONTIG, -1, 1);

    expect_fail(be, rb_glu(be, &d.t, &wrong.t, &u.t, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "shape mismatch",
                NULL);
    expect_fail(be, rb_glu(be, &wrong.t, &g.t, &u.t, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "shape mismatch",
                &wrong);
    expect_fail(be, rb_glu(be, &d.t, &g.t, &wrong.t, RB_UNARY_GELU_TANH), RB_E_INVALID, "rb_glu(gelu_tanh)",
                "shape mismatch", NULL);
    expect_fail(be, rb_glu(be, &d.t, &wi.t, &u.t, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "i32", NULL);
    expect_fail(be, rb_glu(be, &d.t, &g.t, &wi.t, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "i32", NULL);
    expect_fail(be, rb_glu(be, &wi.t, &g.t, &u.t, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "expected f32",
                &wi);
    expect_fail(be, rb_glu(be, &d.t, &g.t, &u.t, RB_UNARY_EXP), RB_E_INVALID, "rb_glu(exp)", "not a gate activation",
                NULL);
    expect_fail(be, rb_glu(be, &d.t, &g.t, &u.t, RB_UNARY_COUNT_), RB_E_INVALID, "rb_glu", "not a gate activation",
                NULL);
    expect_fail(be, rb_glu(be, &d.t, &g.t, NULL, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "NULL", NULL);
    expect_fail(be, rb_glu(be, &d.t, &foreign.t, &u.t, RB_UNARY_SILU), RB_E_INVALID, "rb_glu(silu)", "backend", NULL);
    assert_int_equal(rb_glu(NULL, &d.t, &g.t, &u.t, RB_UNARY_SILU), RB_E_INVALID);

    /* x and h as row ranges of one parent: rows 0-3 and 4-7 are disjoint, 2-5 overlap 0-3 */
    tt par = tf_make(be, &rng, RB_F32, (const int64_t[4]){9, 8, 1, 1}, TF_CONTIG, -1, 1);
    rb_tensor x = par.t, hd = par.t, ho = par.t;
    x.ne[1] = hd.ne[1] = ho.ne[1] = 4;
    x.nb[2] = x.nb[3] = hd.nb[2] = hd.nb[3] = ho.nb[2] = ho.nb[3] = 4 * par.t.nb[1];
    hd.offs += 4 * par.t.nb[1];
    ho.offs += 2 * par.t.nb[1];
    tt dl = tf_make(be, &rng, RB_F32, (const int64_t[4]){9, 4, 1, 1}, TF_SLICE, -1, 1);
    expect_fail(be, rb_add_rms_norm(be, &x, &dl.t, &w.t, 1e-5f, &ho), RB_E_INVALID, "rb_add_rms_norm", "overlaps",
                &par);
    expect_fail(be, rb_add_rms_norm(be, &x, &dl.t, &w.t, 1e-5f, &x), RB_E_INVALID, "rb_add_rms_norm", "overlaps",
                &par);
    TU_OK(rb_add_rms_norm(be, &x, &dl.t, &w.t, 1e-5f, &hd)); /* disjoint views of one buffer are fine */
    expect_fail(be, rb_add_rms_norm(be, &d.t, &wrong.t, &w.t, 1e-5f, &g.t), RB_E_INVALID, "rb_add_rms_norm",
                "shape mismatch", &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &g.t, &w.t, 1e-5f, &wrong.t), RB_E_INVALID, "rb_add_rms_norm",
                "shape mismatch", &d);
    expect_fail(be, rb_add_rms_norm(be, &h16.t, &g.t, &w.t, 1e-5f, &u.t), RB_E_INVALID, "rb_add_rms_norm",
                "expected f32", &h16);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &b16.t, &w.t, 1e-5f, &u.t), RB_E_INVALID, "rb_add_rms_norm", "bf16",
                &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &g.t, &w.t, 1e-5f, &h16.t), RB_E_INVALID, "rb_add_rms_norm", "f16",
                &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &g.t, &w8.t, 1e-5f, &u.t), RB_E_INVALID, "rb_add_rms_norm", "[9]", &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &g.t, &wi.t, 1e-5f, &u.t), RB_E_INVALID, "rb_add_rms_norm", "i32", &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &g.t, NULL, -1.0f, &u.t), RB_E_INVALID, "rb_add_rms_norm", "eps", &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &g.t, NULL, NAN, &u.t), RB_E_INVALID, "rb_add_rms_norm", "eps", &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, &foreign.t, NULL, 1e-5f, &u.t), RB_E_INVALID, "rb_add_rms_norm",
                "backend", &d);
    expect_fail(be, rb_add_rms_norm(be, &d.t, NULL, NULL, 1e-5f, &u.t), RB_E_INVALID, "rb_add_rms_norm", "NULL", &d);
    assert_true(tf_unchanged(&u));
    TU_OK(rb_glu(be, &d.t, &g.t, &u.t, RB_UNARY_SILU)); /* the control: valid arguments pass */

    tf_free(&par);
    tf_free(&dl);
    tf_free(&d);
    tf_free(&g);
    tf_free(&u);
    tf_free(&wrong);
    tf_free(&h16);
    tf_free(&b16);
    tf_free(&foreign);
    tf_free(&w);
    tf_free(&w8);
    tf_free(&wi);
    rb_backend_destroy(be);
    rb_backend_destroy(other);
}

/* A constant buffer (rb_buffer_set_constant, model weights) is read by ops
 * as usual but no op output, rb_buffer_set or rb_buffer_copy may write it;
 * every refusal leaves it untouched. */
static void test_constant_buffer(void **state) {
    (void)state;
    rb_backend *be = tf_backend(&tf_cfgs[1]);
    tu_rng rng;
    tu_rng_seed(&rng, 24000);
    const int64_t ne[4] = {16, 3, 1, 1}, wne[4] = {16, 5, 1, 1}, dne[4] = {5, 3, 1, 1};
    tt w = tf_make(be, &rng, RB_F32, wne, TF_CONTIG, -1, 1);
    tt x = tf_make(be, &rng, RB_F32, ne, TF_CONTIG, -1, 1);
    tt d = tf_make(be, &rng, RB_F32, dne, TF_CONTIG, -1, 1);
    tt nw = tf_make(be, &rng, RB_F32, (const int64_t[4]){16, 1, 1, 1}, TF_CONTIG, 0.5f, 1.5f);
    assert_false(rb_buffer_is_constant(w.buf));
    TU_OK(rb_buffer_set_constant(w.buf));
    TU_OK(rb_buffer_set_constant(nw.buf));
    assert_true(rb_buffer_is_constant(w.buf));
    assert_int_equal(rb_buffer_set_constant(NULL), RB_E_INVALID);
    /* reading a constant buffer is fine */
    TU_OK(rb_matmul(be, &d.t, &w.t, &x.t));
    TU_OK(rb_rms_norm(be, &x.t, &x.t, &nw.t, 1e-6f));
    /* writing it is not */
    expect_fail(be, rb_fill(be, &w.t, 0.0f), RB_E_INVALID, "rb_fill", "constant buffer", &w);
    expect_fail(be, rb_unary(be, RB_UNARY_NEG, &w.t, &w.t), RB_E_INVALID, "rb_unary(neg)", "constant buffer", &w);
    rb_tensor wrow = w.t;
    wrow.ne[1] = 3;
    expect_fail(be, rb_add_rms_norm(be, &wrow, &x.t, &nw.t, 1e-6f, &x.t), RB_E_INVALID, "rb_add_rms_norm",
                "constant buffer", &w);
    expect_fail(be, rb_add_rms_norm(be, &x.t, &x.t, &nw.t, 1e-6f, &wrow), RB_E_INVALID, "rb_add_rms_norm",
                "constant buffer", &w);
    const float zeros[4] = {0};
    expect_fail(be, rb_buffer_set(w.buf, 0, zeros, sizeof zeros), RB_E_INVALID, "rb_buffer_set", "constant", &w);
    expect_fail(be, rb_buffer_copy(w.buf, 0, x.buf, 0, 16), RB_E_INVALID, "rb_buffer_copy", "constant", &w);
    TU_OK(rb_buffer_copy(x.buf, 0, w.buf, 0, 16)); /* copying out of it is fine */
    tf_free(&w);
    tf_free(&x);
    tf_free(&d);
    tf_free(&nw);
    rb_backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_family),
        cmocka_unit_test(test_reduce_index_sort_family),
        cmocka_unit_test(test_fused_family),
        cmocka_unit_test(test_constant_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
