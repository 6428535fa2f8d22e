/* Tensor descriptors: contiguous strides, views (slice, permute, transpose,
 * reshape), spans and validation of bad shapes, checked against strides and
 * byte offsets computed by hand. */
#include "testutil.h"

#include "rbee/quant.h"
#include "rbee/tensor.h"

static void test_init_strides(void **state) {
    (void)state;
    rb_tensor t;
    TU_OK(rb_tensor_init4(&t, RB_F32, 5, 3, 2, 7, NULL, 16));
    assert_int_equal(t.nb[0], 4);
    assert_int_equal(t.nb[1], 20);
    assert_int_equal(t.nb[2], 60);
    assert_int_equal(t.nb[3], 120);
    assert_int_equal(t.offs, 16);
    assert_int_equal(rb_tensor_nelements(&t), 210);
    assert_int_equal(rb_tensor_nrows(&t), 42);
    assert_int_equal(rb_tensor_ndim(&t), 4);
    assert_int_equal(rb_tensor_span(&t), 840);
    assert_true(rb_tensor_is_contiguous(&t));

    const int64_t ne[2] = {64, 3};
    TU_OK(rb_tensor_init(&t, RB_Q4_0, 2, ne, NULL, 0));
    assert_int_equal(t.nb[0], sizeof(rb_block_q4_0));
    assert_int_equal(t.nb[1], 2 * sizeof(rb_block_q4_0));
    assert_int_equal(t.ne[2], 1);
    assert_int_equal(rb_tensor_ndim(&t), 2);
    assert_int_equal(rb_tensor_nbytes_contig(&t), 6 * sizeof(rb_block_q4_0));
}

static void test_init_rejects(void **state) {
    (void)state;
    rb_tensor t;
    const int64_t bad_blk[1] = {33};
    assert_int_equal(rb_tensor_init(&t, RB_Q8_0, 1, bad_blk, NULL, 0), RB_E_INVALID);
    const int64_t neg[2] = {4, -1};
    assert_int_equal(rb_tensor_init(&t, RB_F32, 2, neg, NULL, 0), RB_E_INVALID);
    const int64_t ok[1] = {4};
    assert_int_equal(rb_tensor_init(&t, (rb_dtype)5, 1, ok, NULL, 0), RB_E_INVALID); /* hole in ids */
    assert_int_equal(rb_tensor_init(&t, RB_F32, 0, ok, NULL, 0), RB_E_INVALID);
    assert_int_equal(rb_tensor_init(&t, RB_F32, 5, ok, NULL, 0), RB_E_INVALID);
    const int64_t huge[4] = {INT64_C(1) << 40, INT64_C(1) << 40, 1, 1};
    assert_int_equal(rb_tensor_init(&t, RB_F32, 4, huge, NULL, 0), RB_E_INVALID); /* byte overflow */
}

static void test_views(void **state) {
    (void)state;
    rb_tensor t, v;
    TU_OK(rb_tensor_init4(&t, RB_F16, 6, 4, 3, 1, NULL, 0));
    /* slice rows 1..3 of dim 1 */
    TU_OK(rb_tensor_slice(&t, 1, 1, 2, &v));
    assert_int_equal(v.ne[1], 2);
    assert_int_equal(v.offs, 12);
    assert_false(rb_tensor_is_contiguous(&v));
    assert_true(rb_tensor_rows_contiguous(&v));
    assert_int_equal(rb_tensor_span(&v), 2 * 48 + 12 + 12); /* last elem: (5*2 + 1*12 + 2*48) + 2 */
    /* slice of dim 0 */
    TU_OK(rb_tensor_slice(&t, 0, 2, 3, &v));
    assert_int_equal(v.offs, 4);
    assert_int_equal(rb_tensor_slice(&t, 0, 4, 3, &v), RB_E_INVALID);
    assert_int_equal(rb_tensor_slice(&t, 4, 0, 1, &v), RB_E_INVALID);
    /* transpose */
    TU_OK(rb_tensor_transpose(&t, &v));
    assert_int_equal(v.ne[0], 4);
    assert_int_equal(v.ne[1], 6);
    assert_int_equal(v.nb[0], 12);
    assert_int_equal(v.nb[1], 2);
    assert_false(rb_tensor_is_contiguous(&v));
    assert_false(rb_tensor_rows_contiguous(&v));
    /* permute {2,0,1,3}: ne = {3,6,4,1} */
    const int perm[4] = {2, 0, 1, 3};
    TU_OK(rb_tensor_permute(&t, perm, &v));
    assert_int_equal(v.ne[0], 3);
    assert_int_equal(v.ne[1], 6);
    assert_int_equal(v.ne[2], 4);
    assert_int_equal(v.nb[0], 48);
    const int bad[4] = {0, 0, 1, 2};
    assert_int_equal(rb_tensor_permute(&t, bad, &v), RB_E_INVALID);
    /* reshape only contiguous */
    const int64_t ne2[2] = {12, 6};
    TU_OK(rb_tensor_reshape(&t, 2, ne2, &v));
    assert_int_equal(v.nb[1], 24);
    const int64_t ne3[2] = {12, 5};
    assert_int_equal(rb_tensor_reshape(&t, 2, ne3, &v), RB_E_INVALID);
    rb_tensor tr;
    TU_OK(rb_tensor_transpose(&t, &tr));
    assert_int_equal(rb_tensor_reshape(&tr, 2, ne2, &v), RB_E_INVALID);
    /* quantized: cannot move dim 0, slices along dim 0 in whole blocks */
    TU_OK(rb_tensor_init4(&t, RB_Q8_0, 64, 2, 1, 1, NULL, 0));
    assert_int_equal(rb_tensor_transpose(&t, &v), RB_E_INVALID);
    TU_OK(rb_tensor_slice(&t, 0, 32, 32, &v));
    assert_int_equal(v.offs, sizeof(rb_block_q8_0));
    assert_int_equal(rb_tensor_slice(&t, 0, 16, 32, &v), RB_E_INVALID);
}

static void test_broadcast_rules(void **state) {
    (void)state;
    rb_tensor a, b;
    TU_OK(rb_tensor_init4(&a, RB_F32, 5, 3, 2, 1, NULL, 0));
    TU_OK(rb_tensor_init4(&b, RB_F32, 5, 1, 2, 1, NULL, 0));
    assert_true(rb_tensor_can_broadcast(&b, &a));
    assert_false(rb_tensor_can_broadcast(&a, &b));
    TU_OK(rb_tensor_init4(&b, RB_F32, 4, 1, 1, 1, NULL, 0));
    assert_false(rb_tensor_can_broadcast(&b, &a));
    char buf[64];
    assert_string_equal(rb_tensor_describe(&a, buf, sizeof buf), "f32[5,3,2,1]");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_strides),
        cmocka_unit_test(test_init_rejects),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_broadcast_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
