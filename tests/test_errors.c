/* Invalid input: every case asserts the status code and the message, then that the library
 * still works and nothing leaked. */
#include <threads.h>

#include "common.h"

/* Fixture-free helpers: every test opens ref and builds what it needs. */
static burnc_tensor_t *mat(burnc_device_t *dev, int64_t rows, int64_t cols)
{
    return BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 2, (const int64_t[]){rows, cols}));
}

static burnc_tensor_t *idx_i64(burnc_device_t *dev, int rank, const int64_t *shape, const int64_t *v)
{
    return BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_I64, rank, shape, v));
}

/* Ends a test: the device still computes, nothing leaked. */
static void finish(burnc_device_t *dev)
{
    burnc_error_clear();
    bt_expect_usable(dev);
    cr_assert_eq(burnc_error_code(), BURNC_OK, "a good op set an error: %s", burnc_error_message());
    BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Shapes ------------------------------------------------------------------------------ */

Test(errors, broadcast_mismatch)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 3, 4);
    burnc_tensor_t *b = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){5}));
    BT_ASSERT_FAILS(burnc_add(a, b), BURNC_ERR_SHAPE, "burnc_add");
    BT_ASSERT_MSG_HAS("[3,4]");
    BT_ASSERT_MSG_HAS("[5]");
    BT_ASSERT_FAILS(burnc_mul(b, a), BURNC_ERR_SHAPE, "burnc_mul");
    BT_ASSERT_MSG_HAS("[5]");
    BT_ASSERT_MSG_HAS("[3,4]");
    BT_ASSERT_FAILS(burnc_lt(a, b), BURNC_ERR_SHAPE, "burnc_lt");
    BT_ASSERT_FAILS(burnc_where(a, a, b), BURNC_ERR_SHAPE, "burnc_where");
    BT_ASSERT_MSG_HAS("[5]");
    /* Broadcasting the other way works. */
    burnc_tensor_t *c = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 2, (const int64_t[]){3, 1}));
    burnc_tensor_t *s = BT_NOT_NULL(burnc_add(a, c));
    cr_assert_eq(burnc_tensor_shape(s)[0], 3);
    cr_assert_eq(burnc_tensor_shape(s)[1], 4);
    burnc_tensor_release(s);
    burnc_tensor_release(c);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, matmul_mismatch)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    burnc_tensor_t *b = mat(dev, 4, 5);
    BT_ASSERT_FAILS(burnc_matmul(a, b), BURNC_ERR_SHAPE, "burnc_matmul");
    BT_ASSERT_MSG_HAS("[2,3]");
    BT_ASSERT_MSG_HAS("[4,5]");
    /* Batch axes that do not broadcast. */
    burnc_tensor_t *p = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 3, (const int64_t[]){2, 2, 3}));
    burnc_tensor_t *q = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 3, (const int64_t[]){3, 3, 2}));
    BT_ASSERT_FAILS(burnc_matmul(p, q), BURNC_ERR_SHAPE, "burnc_matmul");
    burnc_tensor_release(q);
    burnc_tensor_release(p);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, reshape_count)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    BT_ASSERT_FAILS(burnc_reshape(a, 2, (const int64_t[]){4, 2}), BURNC_ERR_SHAPE, "burnc_reshape");
    BT_ASSERT_MSG_HAS("[2,3]");
    BT_ASSERT_MSG_HAS("[4,2]");
    BT_ASSERT_FAILS(burnc_reshape(a, 1, (const int64_t[]){7}), BURNC_ERR_SHAPE, "burnc_reshape");
    BT_ASSERT_FAILS(burnc_reshape(a, 2, (const int64_t[]){-1, 4}), BURNC_ERR_SHAPE, "burnc_reshape");
    burnc_tensor_t *ok = BT_NOT_NULL(burnc_reshape(a, 2, (const int64_t[]){-1, 2}));
    cr_assert_eq(burnc_tensor_shape(ok)[0], 3);
    burnc_tensor_release(ok);
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, empty_max)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *e = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 2, (const int64_t[]){0, 3}));
    BT_ASSERT_FAILS(burnc_max(e, 1, (const int[]){0}, false), BURNC_ERR_SHAPE, "burnc_max");
    BT_ASSERT_FAILS(burnc_min(e, 0, NULL, false), BURNC_ERR_SHAPE, "burnc_min");
    /* Reducing the non-empty axis is fine: no output elements. */
    burnc_tensor_t *m = BT_NOT_NULL(burnc_max(e, 1, (const int[]){1}, false));
    cr_assert_eq(burnc_tensor_numel(m), 0);
    /* Sum of nothing is 0. */
    burnc_tensor_t *s = BT_NOT_NULL(burnc_sum(e, 0, NULL, false));
    float v = -1;
    BT_ASSERT_OK(burnc_tensor_read(s, &v, sizeof v));
    cr_assert_eq(v, 0.0f);
    burnc_tensor_release(s);
    burnc_tensor_release(m);
    burnc_tensor_release(e);
    finish(dev);
}

Test(errors, squeeze_and_expand)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    BT_ASSERT_FAILS(burnc_squeeze(a, 1, (const int[]){0}), BURNC_ERR_SHAPE, "burnc_squeeze");
    BT_ASSERT_FAILS(burnc_expand(a, 2, (const int64_t[]){4, 3}), BURNC_ERR_SHAPE, "burnc_expand");
    burnc_tensor_t *b = mat(dev, 2, 4);
    burnc_tensor_t *xs[2] = {a, b};
    BT_ASSERT_FAILS(burnc_cat(2, xs, 0), BURNC_ERR_SHAPE, "burnc_cat");
    BT_ASSERT_FAILS(burnc_stack(2, xs, 0), BURNC_ERR_SHAPE, "burnc_stack");
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    finish(dev);
}

/* ---- Axes -------------------------------------------------------------------------------- */

Test(errors, axis_reductions)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    BT_ASSERT_FAILS(burnc_sum(a, 1, (const int[]){2}, false), BURNC_ERR_AXIS, "burnc_sum");
    BT_ASSERT_MSG_HAS("2");
    BT_ASSERT_FAILS(burnc_sum(a, 1, (const int[]){-3}, false), BURNC_ERR_AXIS, "burnc_sum");
    BT_ASSERT_MSG_HAS("-3");
    BT_ASSERT_FAILS(burnc_mean(a, 2, (const int[]){0, 5}, true), BURNC_ERR_AXIS, "burnc_mean");
    BT_ASSERT_MSG_HAS("5");
    BT_ASSERT_FAILS(burnc_prod(a, 1, (const int[]){9}, false), BURNC_ERR_AXIS, "burnc_prod");
    BT_ASSERT_FAILS(burnc_max(a, 1, (const int[]){2}, false), BURNC_ERR_AXIS, "burnc_max");
    BT_ASSERT_FAILS(burnc_min(a, 1, (const int[]){-4}, false), BURNC_ERR_AXIS, "burnc_min");
    BT_ASSERT_FAILS(burnc_var(a, 1, (const int[]){2}, 1.0, false), BURNC_ERR_AXIS, "burnc_var");
    BT_ASSERT_FAILS(burnc_std(a, 1, (const int[]){2}, 1.0, false), BURNC_ERR_AXIS, "burnc_std");
    BT_ASSERT_FAILS(burnc_argmax(a, 2, false), BURNC_ERR_AXIS, "burnc_argmax");
    BT_ASSERT_FAILS(burnc_argmin(a, -3, false), BURNC_ERR_AXIS, "burnc_argmin");
    burnc_tensor_release(a);
    finish(dev);
}

/* A repeated axis or a permutation that is not one is a bad axis list (INVALID_ARGUMENT), not
 * an axis out of range. */
Test(errors, bad_axis_lists)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    BT_ASSERT_FAILS(burnc_sum(a, 2, (const int[]){1, -1}, false), BURNC_ERR_INVALID_ARGUMENT, "burnc_sum");
    BT_ASSERT_FAILS(burnc_flip(a, 2, (const int[]){0, 0}), BURNC_ERR_INVALID_ARGUMENT, "burnc_flip");
    BT_ASSERT_FAILS(burnc_permute(a, 2, (const int[]){0, 0}), BURNC_ERR_INVALID_ARGUMENT, "burnc_permute");
    BT_ASSERT_FAILS(burnc_permute(a, 1, (const int[]){0}), BURNC_ERR_INVALID_ARGUMENT, "burnc_permute");
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, axis_softmax)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    BT_ASSERT_FAILS(burnc_softmax(a, 2), BURNC_ERR_AXIS, "burnc_softmax");
    BT_ASSERT_MSG_HAS("2");
    BT_ASSERT_FAILS(burnc_log_softmax(a, -3), BURNC_ERR_AXIS, "burnc_log_softmax");
    BT_ASSERT_MSG_HAS("-3");
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, axis_movement)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    burnc_tensor_t *xs[2] = {a, a};
    BT_ASSERT_FAILS(burnc_cat(2, xs, 2), BURNC_ERR_AXIS, "burnc_cat");
    BT_ASSERT_MSG_HAS("2");
    BT_ASSERT_FAILS(burnc_cat(2, xs, -3), BURNC_ERR_AXIS, "burnc_cat");
    /* stack is recorded as unsqueeze + cat; its message may name either of those. */
    BT_ASSERT_FAILS(burnc_stack(2, xs, 3), BURNC_ERR_AXIS, "axis 3");
    BT_ASSERT_FAILS(burnc_transpose(a, 0, 2), BURNC_ERR_AXIS, "burnc_transpose");
    BT_ASSERT_FAILS(burnc_transpose(a, -3, 1), BURNC_ERR_AXIS, "burnc_transpose");
    BT_ASSERT_FAILS(burnc_unsqueeze(a, 3), BURNC_ERR_AXIS, "burnc_unsqueeze");
    BT_ASSERT_MSG_HAS("3");
    BT_ASSERT_FAILS(burnc_unsqueeze(a, -4), BURNC_ERR_AXIS, "burnc_unsqueeze");
    BT_ASSERT_FAILS(burnc_slice(a, 2, 0, 1, 1), BURNC_ERR_AXIS, "burnc_slice");
    BT_ASSERT_FAILS(burnc_flip(a, 1, (const int[]){2}), BURNC_ERR_AXIS, "burnc_flip");
    BT_ASSERT_FAILS(burnc_squeeze(a, 1, (const int[]){5}), BURNC_ERR_AXIS, "burnc_squeeze");
    /* Edges that are valid: unsqueeze at rank and at -(rank+1). */
    burnc_tensor_t *u1 = BT_NOT_NULL(burnc_unsqueeze(a, 2));
    burnc_tensor_t *u2 = BT_NOT_NULL(burnc_unsqueeze(a, -3));
    cr_assert_eq(burnc_tensor_shape(u1)[2], 1);
    cr_assert_eq(burnc_tensor_shape(u2)[0], 1);
    burnc_tensor_release(u2);
    burnc_tensor_release(u1);
    BT_ASSERT_FAILS(burnc_permute(a, 2, (const int[]){0, 2}), BURNC_ERR_AXIS, "burnc_permute");
    BT_ASSERT_FAILS(burnc_slice(a, 0, 0, 2, 0), BURNC_ERR_INVALID_ARGUMENT, "burnc_slice");
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, axis_index_ops)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    burnc_tensor_t *i1 = idx_i64(dev, 1, (const int64_t[]){2}, (const int64_t[]){0, 1});
    burnc_tensor_t *i2 = idx_i64(dev, 2, (const int64_t[]){1, 2}, (const int64_t[]){0, 1});
    burnc_tensor_t *src1 = mat(dev, 2, 2);
    burnc_tensor_t *src2 = mat(dev, 1, 2);
    BT_ASSERT_FAILS(burnc_index_select(a, 2, i1), BURNC_ERR_AXIS, "burnc_index_select");
    BT_ASSERT_FAILS(burnc_index_select(a, -3, i1), BURNC_ERR_AXIS, "burnc_index_select");
    BT_ASSERT_FAILS(burnc_gather(a, 2, i2), BURNC_ERR_AXIS, "burnc_gather");
    BT_ASSERT_FAILS(burnc_scatter_add(a, 2, i2, src2), BURNC_ERR_AXIS, "burnc_scatter_add");
    BT_ASSERT_FAILS(burnc_index_add(a, 2, i1, src1), BURNC_ERR_AXIS, "burnc_index_add");
    BT_ASSERT_FAILS(burnc_slice_assign(a, 2, 0, 1, 1, src2), BURNC_ERR_AXIS, "burnc_slice_assign");
    burnc_tensor_release(src2);
    burnc_tensor_release(src1);
    burnc_tensor_release(i2);
    burnc_tensor_release(i1);
    burnc_tensor_release(a);
    finish(dev);
}

/* ---- Sizes and ranks --------------------------------------------------------------------- */

Test(errors, negative_dimension)
{
    burnc_device_t *dev = bt_ref();
    BT_ASSERT_FAILS(burnc_zeros(dev, BURNC_DTYPE_F32, 2, (const int64_t[]){2, -1}), BURNC_ERR_OVERFLOW, "burnc_zeros");
    BT_ASSERT_MSG_HAS("-1");
    BT_ASSERT_FAILS(burnc_ones(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){-7}), BURNC_ERR_OVERFLOW, "burnc_ones");
    BT_ASSERT_MSG_HAS("-7");
    BT_ASSERT_FAILS(burnc_full(dev, BURNC_DTYPE_I32, 1, (const int64_t[]){-1}, 3), BURNC_ERR_OVERFLOW, "burnc_full");
    BT_ASSERT_FAILS(burnc_rand(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){-2}), BURNC_ERR_OVERFLOW, "burnc_rand");
    float d[1] = {0};
    BT_ASSERT_FAILS(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){-1}, d), BURNC_ERR_OVERFLOW,
                    "burnc_tensor_from_data");
    BT_ASSERT_FAILS(burnc_eye(dev, BURNC_DTYPE_F32, -2, 3), BURNC_ERR_OVERFLOW, "burnc_eye");
    finish(dev);
}

Test(errors, count_overflow)
{
    burnc_device_t *dev = bt_ref();
    const int64_t big = (int64_t)1 << 32;
    /* 2^64 elements. */
    BT_ASSERT_FAILS(burnc_zeros(dev, BURNC_DTYPE_U8, 2, (const int64_t[]){big, big}), BURNC_ERR_OVERFLOW,
                    "burnc_zeros");
    BT_ASSERT_FAILS(burnc_ones(dev, BURNC_DTYPE_U8, 3, (const int64_t[]){INT64_MAX, 2, 0 + 1}), BURNC_ERR_OVERFLOW,
                    "burnc_ones");
    /* 2^62 elements fit, 2^64 bytes of f32 do not. */
    BT_ASSERT_FAILS(burnc_zeros(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){(int64_t)1 << 62}), BURNC_ERR_OVERFLOW,
                    "burnc_zeros");
    finish(dev);
}

/* An empty axis makes the count 0, whatever the others are (no overflow in strides either). */
Test(errors, empty_with_huge_axes)
{
    burnc_device_t *dev = bt_ref();
    const int64_t big = (int64_t)1 << 32;
    burnc_tensor_t *e = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 3, (const int64_t[]){big, 0, big}));
    cr_assert_eq(burnc_tensor_numel(e), 0);
    /* Reducing the empty axis would give 2^64 zeros. */
    BT_ASSERT_FAILS(burnc_sum(e, 1, (const int[]){1}, false), BURNC_ERR_OVERFLOW, "burnc_sum");
    burnc_tensor_release(e);
    finish(dev);
}

/* Results of ops whose element count passes 2^63: a broadcast, an expand, a matmul. */
Test(errors, result_overflow)
{
    burnc_device_t *dev = bt_ref();
    const int64_t big = (int64_t)1 << 32;
    burnc_tensor_t *col = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_U8, 2, (const int64_t[]){1, 1}));
    burnc_tensor_t *wide = BT_NOT_NULL(burnc_expand(col, 2, (const int64_t[]){big, 1}));
    burnc_tensor_t *tall = BT_NOT_NULL(burnc_expand(col, 2, (const int64_t[]){1, big}));
    BT_ASSERT_FAILS(burnc_add(wide, tall), BURNC_ERR_OVERFLOW, "burnc_add");
    BT_ASSERT_FAILS(burnc_expand(wide, 2, (const int64_t[]){big, big}), BURNC_ERR_OVERFLOW, "burnc_expand");
    burnc_tensor_t *colf = BT_NOT_NULL(burnc_cast(col, BURNC_DTYPE_F32));
    burnc_tensor_t *wf = BT_NOT_NULL(burnc_expand(colf, 2, (const int64_t[]){big, 1}));
    burnc_tensor_t *tf = BT_NOT_NULL(burnc_transpose(wf, 0, 1));
    BT_ASSERT_FAILS(burnc_matmul(wf, tf), BURNC_ERR_OVERFLOW, "burnc_matmul");
    burnc_tensor_release(tf);
    burnc_tensor_release(wf);
    burnc_tensor_release(colf);
    burnc_tensor_release(tall);
    burnc_tensor_release(wide);
    burnc_tensor_release(col);
    finish(dev);
}

Test(errors, rank_limits)
{
    burnc_device_t *dev = bt_ref();
    int64_t shape[BURNC_MAX_RANK + 1];
    for (int i = 0; i <= BURNC_MAX_RANK; i++)
        shape[i] = 1;
    BT_ASSERT_FAILS(burnc_zeros(dev, BURNC_DTYPE_F32, BURNC_MAX_RANK + 1, shape), BURNC_ERR_INVALID_ARGUMENT,
                    "burnc_zeros");
    BT_ASSERT_FAILS(burnc_zeros(dev, BURNC_DTYPE_F32, -1, shape), BURNC_ERR_INVALID_ARGUMENT, "burnc_zeros");
    float d[1] = {0};
    BT_ASSERT_FAILS(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, BURNC_MAX_RANK + 1, shape, d),
                    BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_from_data");
    /* The largest rank works; one more axis through a view op is refused. */
    burnc_tensor_t *t = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, BURNC_MAX_RANK, shape));
    cr_assert_eq(burnc_tensor_rank(t), BURNC_MAX_RANK);
    burnc_error_clear();
    cr_assert_null(burnc_unsqueeze(t, 0));
    cr_assert_neq(burnc_error_code(), BURNC_OK);
    BT_ASSERT_MSG_HAS("burnc_unsqueeze");
    burnc_error_clear();
    cr_assert_null(burnc_reshape(t, BURNC_MAX_RANK + 1, shape));
    cr_assert_neq(burnc_error_code(), BURNC_OK);
    BT_ASSERT_MSG_HAS("burnc_reshape");
    burnc_tensor_release(t);
    finish(dev);
}

/* ---- Dtypes ------------------------------------------------------------------------------ */

Test(errors, unsupported_dtype)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[1] = {4};
    BT_ASSERT_FAILS(burnc_rand(dev, BURNC_DTYPE_I32, 1, shape), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_rand");
    BT_ASSERT_MSG_HAS("i32");
    BT_ASSERT_FAILS(burnc_randn(dev, BURNC_DTYPE_BOOL, 1, shape), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_randn");
    BT_ASSERT_FAILS(burnc_zeros(dev, (burnc_dtype_t)99, 1, shape), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_zeros");

    burnc_tensor_t *b = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_BOOL, 1, shape));
    BT_ASSERT_FAILS(burnc_add(b, b), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_add");
    BT_ASSERT_MSG_HAS("bool");
    BT_ASSERT_FAILS(burnc_mul_scalar(b, 2), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_mul");
    BT_ASSERT_FAILS(burnc_neg(b), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_neg");
    BT_ASSERT_FAILS(burnc_max(b, 0, NULL, false), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_max");
    BT_ASSERT_FAILS(burnc_matmul(b, b), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_matmul");

    burnc_tensor_t *i = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_I32, 0, 4, 1));
    BT_ASSERT_FAILS(burnc_mean(i, 0, NULL, false), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_mean");
    BT_ASSERT_MSG_HAS("i32");
    BT_ASSERT_FAILS(burnc_var(i, 0, NULL, 1.0, false), BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_var");
    /* cast to DEFAULT is refused; the header names no code for it. */
    burnc_error_clear();
    cr_assert_null(burnc_cast(i, BURNC_DTYPE_DEFAULT));
    cr_assert(burnc_error_code() == BURNC_ERR_UNSUPPORTED_DTYPE || burnc_error_code() == BURNC_ERR_INVALID_ARGUMENT,
              "cast to DEFAULT: %s", burnc_status_name(burnc_error_code()));
    BT_ASSERT_MSG_HAS("burnc_cast");

    /* What is allowed on bool: comparisons, logic, casts, sum (to i64). */
    burnc_scope_begin();
    burnc_tensor_t *n = BT_NOT_NULL(burnc_sum(burnc_logical_and(b, burnc_cast(b, BURNC_DTYPE_I32)), 0, NULL, false));
    burnc_tensor_keep(n);
    burnc_scope_end();
    cr_assert_eq(burnc_tensor_dtype(n), BURNC_DTYPE_I64);
    int64_t v = 0;
    BT_ASSERT_OK(burnc_tensor_read(n, &v, sizeof v));
    cr_assert_eq(v, 4);
    burnc_tensor_release(n);
    burnc_tensor_release(i);
    burnc_tensor_release(b);
    finish(dev);
}

/* ---- NULL handles and chains ------------------------------------------------------------- */

Test(errors, null_inputs_keep_last_error)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 2);
    burnc_error_clear();
    cr_assert_null(burnc_add(NULL, a));
    cr_assert_null(burnc_exp(NULL));
    cr_assert_null(burnc_sum(NULL, 0, NULL, false));
    cr_assert_null(burnc_matmul(a, NULL));
    cr_assert_null(burnc_reshape(NULL, 1, (const int64_t[]){4}));
    cr_assert_null(burnc_where(NULL, a, a));
    cr_assert_null(burnc_index_select(a, 0, NULL));
    cr_assert_null(burnc_softmax(NULL, 0));
    cr_assert_null(burnc_layer_norm(NULL, 1, 1e-5));
    burnc_tensor_t *xs[2] = {a, NULL};
    cr_assert_null(burnc_cat(2, xs, 0));
    cr_assert_null(burnc_stack(2, xs, 0));
    cr_assert_eq(burnc_error_code(), BURNC_OK, "a NULL input set the last error: %s", burnc_error_message());
    cr_assert_str_eq(burnc_error_message(), "");

    /* After a failure, NULL inputs leave it untouched. */
    burnc_tensor_t *b = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){5}));
    BT_ASSERT_FAILS(burnc_add(a, b), BURNC_ERR_SHAPE, "burnc_add");
    char before[512];
    snprintf(before, sizeof before, "%s", burnc_error_message());
    cr_assert_null(burnc_mul(NULL, NULL));
    cr_assert_null(burnc_transpose(NULL, 0, 1));
    cr_assert_null(burnc_tensor_to_device(NULL, dev));
    cr_assert_eq(burnc_error_code(), BURNC_ERR_SHAPE);
    cr_assert_str_eq(burnc_error_message(), before);
    /* A successful op does not clear it either. */
    burnc_tensor_t *ok = BT_NOT_NULL(burnc_exp(a));
    cr_assert_eq(burnc_error_code(), BURNC_ERR_SHAPE);
    burnc_tensor_release(ok);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, chain_reports_first_failure)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 3, 4);
    burnc_tensor_t *b = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){5}));
    burnc_error_clear();
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_softmax(burnc_sum(burnc_exp(burnc_add(a, b)), 1, (const int[]){1}, false), 0);
    burnc_scope_end();
    cr_assert_null(y);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_SHAPE, "burnc_add");
    BT_ASSERT_MSG_HAS("[3,4]");
    BT_ASSERT_MSG_HAS("[5]");
    /* The failure in the middle of a chain: the axis error is the one reported. */
    burnc_error_clear();
    burnc_scope_begin();
    y = burnc_neg(burnc_transpose(burnc_sum(burnc_exp(a), 1, (const int[]){7}, false), 0, 1));
    burnc_scope_end();
    cr_assert_null(y);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_AXIS, "burnc_sum");
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, status_functions_given_null)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    float buf[6];
    burnc_memory_report_t r;
    burnc_device_config_t cfg = {0};
    BT_ASSERT_STATUS(burnc_tensor_read(NULL, buf, sizeof buf), BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_read");
    BT_ASSERT_STATUS(burnc_tensor_read(a, NULL, sizeof buf), BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_read");
    BT_ASSERT_STATUS(burnc_device_sync(NULL), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_sync");
    BT_ASSERT_STATUS(burnc_device_flush(NULL), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_flush");
    BT_ASSERT_STATUS(burnc_device_seed(NULL, 1), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_seed");
    BT_ASSERT_STATUS(burnc_device_memory_cleanup(NULL), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_memory_cleanup");
    BT_ASSERT_STATUS(burnc_device_memory(NULL, &r), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_memory");
    BT_ASSERT_STATUS(burnc_device_memory(dev, NULL), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_memory");
    BT_ASSERT_STATUS(burnc_device_configure(NULL, &cfg), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_configure");
    BT_ASSERT_STATUS(burnc_device_configure(dev, NULL), BURNC_ERR_INVALID_ARGUMENT, "burnc_device_configure");
    /* Handle functions that accept NULL. */
    burnc_tensor_release(NULL);
    burnc_device_release(NULL);
    cr_assert_null(burnc_tensor_keep(NULL));
    /* Bad creation arguments. */
    BT_ASSERT_FAILS(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){2}, NULL),
                    BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_from_data");
    BT_ASSERT_FAILS(burnc_zeros(dev, BURNC_DTYPE_F32, 2, NULL), BURNC_ERR_INVALID_ARGUMENT, "burnc_zeros");
    BT_ASSERT_FAILS(burnc_arange(dev, BURNC_DTYPE_F32, 0, 4, 0), BURNC_ERR_INVALID_ARGUMENT, "burnc_arange");
    BT_ASSERT_FAILS(burnc_cat(0, NULL, 0), BURNC_ERR_INVALID_ARGUMENT, "burnc_cat");
    BT_ASSERT_FAILS(burnc_stack(0, NULL, 0), BURNC_ERR_INVALID_ARGUMENT, "burnc_stack");
    burnc_tensor_release(a);
    finish(dev);
}

/* ---- Devices ----------------------------------------------------------------------------- */

Test(errors, unknown_device)
{
    BT_ASSERT_FAILS(burnc_device_open("tpu:0"), BURNC_ERR_UNKNOWN_DEVICE, "tpu");
    BT_ASSERT_FAILS(burnc_device_open("tpu"), BURNC_ERR_UNKNOWN_DEVICE, "tpu");
    BT_ASSERT_FAILS(burnc_device_open("REF!"), BURNC_ERR_UNKNOWN_DEVICE, "REF!");
    BT_ASSERT_FAILS(burnc_device_open("ref:x"), BURNC_ERR_INVALID_ARGUMENT, "ref:x");
    BT_ASSERT_FAILS(burnc_device_open("cuda:abc"), BURNC_ERR_INVALID_ARGUMENT, "cuda:abc");
    finish(bt_ref());
}

/* A device kind whose hardware, driver or backend is missing fails with a reason. Where it is
 * present (the GPU machine, a build with the backend), it opens instead. */
static void check_missing(const char *spec, burnc_device_type_t type, const char *kind)
{
    if (burnc_device_enumerate(type, NULL, 0) > 0) {
        burnc_device_t *d = burnc_device_open(spec);
        cr_assert_not_null(d, "%s is listed but does not open: %s", spec, burnc_error_message());
        burnc_device_release(d);
        return;
    }
    BT_ASSERT_FAILS(burnc_device_open(spec), BURNC_ERR_UNAVAILABLE, kind);
    cr_assert(strlen(burnc_error_message()) > strlen(spec) + 8, "no reason given: \"%s\"", burnc_error_message());
}

Test(errors, unavailable_devices)
{
    check_missing("cuda:0", BURNC_DEVICE_CUDA, "cuda");
    check_missing("cuda", BURNC_DEVICE_CUDA, "cuda");
    check_missing("vulkan:0", BURNC_DEVICE_VULKAN, "vulkan");
    check_missing("vulkan", BURNC_DEVICE_VULKAN, "vulkan");
    check_missing("cpu", BURNC_DEVICE_CPU, "cpu");
    /* An index past the devices that exist. */
    BT_ASSERT_FAILS(burnc_device_open("cuda:99"), BURNC_ERR_UNAVAILABLE, "cuda");
    finish(bt_ref());
}

/* ref and cpu run on the host: no device clock; misuse of the timer is refused alike. */
Test(errors, timer_on_host_devices)
{
    burnc_device_t *ref = bt_ref(), *cpu = burnc_device_open("cpu"); /* cpu: NULL without LLVM */
    double s = 1;
    BT_ASSERT_STATUS(burnc_device_timer_start(ref), BURNC_ERR_UNAVAILABLE, "ref runs on the host");
    BT_ASSERT_STATUS(burnc_device_timer_stop(ref, &s), BURNC_ERR_UNAVAILABLE, "ref runs on the host");
    cr_assert_eq(s, 0, "a failed stop leaves %g in seconds", s);
    if (cpu) {
        BT_ASSERT_STATUS(burnc_device_timer_start(cpu), BURNC_ERR_UNAVAILABLE, "cpu runs on the host");
        bt_expect_usable(cpu);
        burnc_device_release(cpu);
    }
    BT_ASSERT_STATUS(burnc_device_timer_start(NULL), BURNC_ERR_INVALID_ARGUMENT, "device is NULL");
    BT_ASSERT_STATUS(burnc_device_timer_stop(ref, NULL), BURNC_ERR_INVALID_ARGUMENT, "seconds is NULL");
    finish(ref);
}

Test(errors, same_device_twice)
{
    burnc_device_t *d1 = bt_ref();
    burnc_device_t *d2 = bt_ref();
    cr_assert(burnc_device_equal(d1, d2), "ref opened twice gave two devices");
    /* Tensors of the two handles mix freely: they are one device. */
    burnc_tensor_t *a = mat(d1, 2, 2);
    burnc_tensor_t *b = mat(d2, 2, 2);
    burnc_tensor_t *c = BT_NOT_NULL(burnc_add(a, b));
    bt_expect_f32(c, 4, (const float[]){2, 2, 2, 2}, 0);
    burnc_tensor_release(c);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    burnc_device_release(d2);
    finish(d1);
}

/* Tensors of two devices in one op. "ref:1" is a second, independent reference device (the
 * multidevice suite covers it further); a device of another kind is checked too where one is
 * available (cpu, cuda or vulkan: none are built yet). */
static void check_mismatch(burnc_device_t *r, burnc_device_t *o)
{
    cr_assert_not(burnc_device_equal(r, o));
    burnc_tensor_t *a = mat(r, 2, 2);
    burnc_tensor_t *b = mat(o, 2, 2);
    BT_ASSERT_FAILS(burnc_add(a, b), BURNC_ERR_DEVICE_MISMATCH, "burnc_add");
    BT_ASSERT_MSG_HAS(burnc_device_spec(o));
    BT_ASSERT_MSG_HAS(burnc_device_spec(r));
    burnc_tensor_t *xs[2] = {a, b};
    BT_ASSERT_FAILS(burnc_cat(2, xs, 0), BURNC_ERR_DEVICE_MISMATCH, "burnc_cat");
    BT_ASSERT_FAILS(burnc_matmul(b, a), BURNC_ERR_DEVICE_MISMATCH, "burnc_matmul");
    BT_ASSERT_FAILS(burnc_where(a, b, a), BURNC_ERR_DEVICE_MISMATCH, "burnc_where");
    /* to_device is the way across. */
    burnc_tensor_t *b2 = BT_NOT_NULL(burnc_tensor_to_device(b, r));
    burnc_tensor_t *c = BT_NOT_NULL(burnc_add(a, b2));
    bt_expect_f32(c, 4, (const float[]){2, 2, 2, 2}, 0);
    burnc_tensor_release(c);
    burnc_tensor_release(b2);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    bt_expect_usable(o);
}

Test(errors, device_mismatch)
{
    burnc_device_t *r = bt_ref();
    burnc_device_t *r1 = BT_NOT_NULL(burnc_device_open("ref:1"));
    check_mismatch(r, r1);
    burnc_device_release(r1);
    finish(r);
}

Test(errors, device_mismatch_other_kind)
{
    burnc_device_info_t info[8];
    int n = burnc_device_enumerate(BURNC_DEVICE_ALL & ~BURNC_DEVICE_REF, info, 8);
    if (n <= 0)
        cr_skip("needs a device of a second kind (cpu, cuda or vulkan); only ref is available");
    burnc_device_t *r = bt_ref();
    burnc_device_t *o = BT_NOT_NULL(burnc_device_open(info[0].spec));
    check_mismatch(r, o);
    burnc_device_release(o);
    finish(r);
}

/* ---- Reads and run-time errors ----------------------------------------------------------- */

Test(errors, buffer_too_small)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *a = mat(dev, 2, 3);
    float buf[8];
    BT_ASSERT_STATUS(burnc_tensor_read(a, buf, 20), BURNC_ERR_BUFFER_TOO_SMALL, "burnc_tensor_read");
    BT_ASSERT_MSG_HAS("24");
    BT_ASSERT_MSG_HAS("20");
    BT_ASSERT_STATUS(burnc_tensor_read(a, buf, 0), BURNC_ERR_BUFFER_TOO_SMALL, "burnc_tensor_read");
    /* Larger than needed is fine. */
    BT_ASSERT_OK(burnc_tensor_read(a, buf, sizeof buf));
    cr_assert_eq(buf[5], 1.0f);
    burnc_tensor_release(a);
    finish(dev);
}

Test(errors, index_out_of_range_select)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_F32, 0, 12, 1));
    burnc_tensor_t *x2 = BT_NOT_NULL(burnc_reshape(x, 2, (const int64_t[]){4, 3}));
    burnc_tensor_t *bad = idx_i64(dev, 1, (const int64_t[]){2}, (const int64_t[]){0, 5});
    burnc_error_clear();
    burnc_tensor_t *y = BT_NOT_NULL(burnc_index_select(x2, 0, bad)); /* checked when it runs */
    burnc_tensor_t *z = BT_NOT_NULL(burnc_add_scalar(y, 1));        /* computed from it */
    float out[6];
    BT_ASSERT_STATUS(burnc_tensor_read(y, out, sizeof out), BURNC_ERR_INDEX, "index_select");
    BT_ASSERT_MSG_HAS("5");
    /* The first execution error since the last sync. */
    BT_ASSERT_STATUS(burnc_device_sync(dev), BURNC_ERR_INDEX, "index_select");
    BT_ASSERT_OK(burnc_device_sync(dev));
    /* The failed tensor and what was computed from it stay poisoned. */
    BT_ASSERT_STATUS(burnc_tensor_read(y, out, sizeof out), BURNC_ERR_INDEX, "index_select");
    BT_ASSERT_STATUS(burnc_tensor_read(z, out, sizeof out), BURNC_ERR_INDEX, "index_select");
    /* A good index on the same device works; negative indices count from the end. */
    burnc_tensor_t *good = idx_i64(dev, 1, (const int64_t[]){2}, (const int64_t[]){3, -4});
    burnc_tensor_t *w = BT_NOT_NULL(burnc_index_select(x2, 0, good));
    bt_expect_f32(w, 6, (const float[]){9, 10, 11, 0, 1, 2}, 0);
    burnc_tensor_t *neg = idx_i64(dev, 1, (const int64_t[]){1}, (const int64_t[]){-5});
    burnc_tensor_t *v = BT_NOT_NULL(burnc_index_select(x2, 0, neg));
    BT_ASSERT_STATUS(burnc_tensor_read(v, out, sizeof out), BURNC_ERR_INDEX, "index_select");
    burnc_tensor_t *ts[] = {v, neg, w, good, z, y, bad, x2, x};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        burnc_tensor_release(ts[i]);
    BT_ASSERT_STATUS(burnc_device_sync(dev), BURNC_ERR_INDEX, "index_select");
    finish(dev);
}

Test(errors, index_out_of_range_gather)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *x = mat(dev, 4, 3);
    burnc_tensor_t *bad = idx_i64(dev, 2, (const int64_t[]){2, 3}, (const int64_t[]){0, 1, 2, 3, 4, 0});
    burnc_tensor_t *y = BT_NOT_NULL(burnc_gather(x, 0, bad));
    /* Sync first this time: it reports the error, then the read of the result does too. */
    BT_ASSERT_STATUS(burnc_device_sync(dev), BURNC_ERR_INDEX, "gather");
    float out[6];
    BT_ASSERT_STATUS(burnc_tensor_read(y, out, sizeof out), BURNC_ERR_INDEX, "gather");
    BT_ASSERT_OK(burnc_device_sync(dev));
    /* index_add and scatter_add check their indices too. */
    burnc_tensor_t *src = mat(dev, 2, 3);
    burnc_tensor_t *i1 = idx_i64(dev, 1, (const int64_t[]){2}, (const int64_t[]){1, 4});
    burnc_tensor_t *ia = BT_NOT_NULL(burnc_index_add(x, 0, i1, src));
    BT_ASSERT_STATUS(burnc_tensor_read(ia, (float[12]){0}, 12 * sizeof(float)), BURNC_ERR_INDEX, "index_add");
    burnc_tensor_t *sa = BT_NOT_NULL(burnc_scatter_add(x, 0, bad, src));
    BT_ASSERT_STATUS(burnc_tensor_read(sa, (float[12]){0}, 12 * sizeof(float)), BURNC_ERR_INDEX, "scatter_add");
    burnc_tensor_t *ts[] = {sa, ia, i1, src, y, bad, x};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        burnc_tensor_release(ts[i]);
    burnc_device_sync(dev);
    finish(dev);
}

/* ---- The last error ---------------------------------------------------------------------- */

Test(errors, error_clear)
{
    burnc_device_t *dev = bt_ref();
    BT_ASSERT_FAILS(burnc_device_open("tpu:0"), BURNC_ERR_UNKNOWN_DEVICE, "tpu");
    burnc_error_clear();
    cr_assert_eq(burnc_error_code(), BURNC_OK);
    cr_assert_not_null(burnc_error_message());
    cr_assert_str_eq(burnc_error_message(), "");
    /* A later failure replaces an earlier one. */
    BT_ASSERT_FAILS(burnc_device_open("tpu:0"), BURNC_ERR_UNKNOWN_DEVICE, "tpu");
    BT_ASSERT_FAILS(burnc_arange(dev, BURNC_DTYPE_F32, 0, 1, 0), BURNC_ERR_INVALID_ARGUMENT, "burnc_arange");
    finish(dev);
}

static int other_thread(void *arg)
{
    int *seen = arg;
    seen[0] = burnc_error_code();
    burnc_device_t *d = burnc_device_open("nosuchdevice");
    seen[1] = d == NULL ? (int)burnc_error_code() : -1;
    burnc_device_release(d);
    return 0;
}

Test(errors, last_error_per_thread)
{
    burnc_device_t *dev = bt_ref();
    BT_ASSERT_FAILS(burnc_arange(dev, BURNC_DTYPE_F32, 0, 1, 0), BURNC_ERR_INVALID_ARGUMENT, "burnc_arange");
    int seen[2] = {-1, -1};
    thrd_t t;
    cr_assert_eq(thrd_create(&t, other_thread, seen), thrd_success);
    thrd_join(t, NULL);
    cr_assert_eq(seen[0], BURNC_OK, "a new thread sees another thread's error");
    cr_assert_eq(seen[1], BURNC_ERR_UNKNOWN_DEVICE);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INVALID_ARGUMENT, "burnc_arange");
    finish(dev);
}

Test(errors, status_names)
{
    cr_assert_str_eq(burnc_status_name(BURNC_OK), "BURNC_OK");
    cr_assert_str_eq(burnc_status_name(BURNC_ERR_SHAPE), "BURNC_ERR_SHAPE");
    cr_assert_str_eq(burnc_status_name(BURNC_ERR_INDEX), "BURNC_ERR_INDEX");
    cr_assert_str_eq(burnc_status_name(BURNC_ERR_INTERNAL), "BURNC_ERR_INTERNAL");
    for (int s = BURNC_OK; s <= BURNC_ERR_INTERNAL; s++) {
        const char *n = burnc_status_name((burnc_status_t)s);
        cr_assert(n != NULL && strncmp(n, "BURNC_", 6) == 0, "status %d is named \"%s\"", s, n ? n : "(null)");
        for (int t = BURNC_OK; t < s; t++)
            cr_assert_str_neq(n, burnc_status_name((burnc_status_t)t), "two codes share the name %s", n);
    }
    cr_assert_not_null(burnc_status_name((burnc_status_t)999));
    cr_assert_not_null(burnc_status_name((burnc_status_t)-1));
    BT_LEAK_CHECK();
}

/* The runtime's error setter (runtime/error.c), which wrappers call with the last message as an
 * argument to add context to it. */
burnc_status_t rt_fail(burnc_status_t code, const char *fmt, ...);

Test(errors, wrapping_the_last_message_keeps_it)
{
    cr_assert_null(burnc_device_open("nosuchdevice"));
    char inner[512];
    snprintf(inner, sizeof inner, "%s", burnc_error_message());
    cr_assert(strlen(inner) > 10, "no message to wrap: \"%s\"", inner);
    rt_fail(BURNC_ERR_INTERNAL, "outer context: %s", burnc_error_message());
    char want[600];
    snprintf(want, sizeof want, "outer context: %s", inner);
    cr_assert_str_eq(burnc_error_message(), want);
    cr_assert_eq(burnc_error_code(), BURNC_ERR_INTERNAL);
    burnc_error_clear();
    BT_LEAK_CHECK();
}
