/* Scopes: handles made inside are released at the end unless kept. */
#include <stdatomic.h>
#include <threads.h>

#include "common.h"

static void count_release(void *user) { atomic_fetch_add((atomic_int *)user, 1); }

enum { N = 4096 }; /* elements of the tensors whose memory the tests watch */

Test(scope, releases_at_end_memory)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[1] = {N};
    burnc_memory_report_t r0 = bt_memory(dev);
    burnc_scope_begin();
    burnc_tensor_t *a = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, shape));
    burnc_tensor_t *b = BT_NOT_NULL(burnc_add_scalar(a, 1));
    burnc_tensor_t *c = BT_NOT_NULL(burnc_mul(a, b));
    BT_ASSERT_OK(burnc_device_sync(dev)); /* all three held: materialized */
    burnc_memory_report_t r1 = bt_memory(dev);
    cr_assert(r1.bytes_in_use >= r0.bytes_in_use + 3 * N * sizeof(float), "in use %llu -> %llu",
              (unsigned long long)r0.bytes_in_use, (unsigned long long)r1.bytes_in_use);
    cr_assert(r1.buffers_in_use >= r0.buffers_in_use + 3);
    (void)c;
    burnc_scope_end();
    BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_memory_report_t r2 = bt_memory(dev);
    cr_assert_eq(r2.bytes_in_use, r0.bytes_in_use, "in use %llu before the scope, %llu after it",
                 (unsigned long long)r0.bytes_in_use, (unsigned long long)r2.bytes_in_use);
    cr_assert_eq(r2.buffers_in_use, r0.buffers_in_use);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(scope, releases_at_end_wrap_callback)
{
    burnc_device_t *dev = bt_ref();
    static float data[4] = {1, 2, 3, 4};
    atomic_int released = 0;
    burnc_scope_begin();
    burnc_tensor_t *w = BT_NOT_NULL(
        burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){4}, data, count_release, &released));
    burnc_tensor_t *y = BT_NOT_NULL(burnc_exp(w)); /* pending, reads the wrapped memory */
    burnc_tensor_t *v = BT_NOT_NULL(burnc_reshape(w, 2, (const int64_t[]){2, 2}));
    (void)y;
    (void)v;
    cr_assert_eq(atomic_load(&released), 0);
    burnc_scope_end();
    /* Every handle is gone; a pending op that reads the memory may hold it until it has run
     * (or been dropped) at the next sync. */
    BT_ASSERT_OK(burnc_device_sync(dev));
    cr_assert_eq(atomic_load(&released), 1, "release callback ran %d times after the scope", atomic_load(&released));
    burnc_device_release(dev);
    cr_assert_eq(atomic_load(&released), 1);
    BT_LEAK_CHECK();
}

Test(scope, kept_survive)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[2] = {2, 3};
    burnc_tensor_t *x = bt_f32(dev, 2, shape, (const float[]){1, 2, 3, 4, 5, 6});
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_sum(burnc_mul_scalar(burnc_add_scalar(x, 1), 2), 1, (const int[]){1}, false);
    cr_assert_eq(burnc_tensor_keep(y), y, "keep does not return its argument");
    burnc_tensor_t *m = burnc_tensor_keep(burnc_max(x, 0, NULL, false));
    burnc_scope_end();
    cr_assert_not_null(y);
    cr_assert_not_null(m);
    bt_expect_f32(y, 2, (const float[]){18, 36}, 0);
    bt_expect_f32(m, 1, (const float[]){6}, 0);
    /* A kept handle is an ordinary one: ops on it outside any scope belong to the caller. */
    burnc_tensor_t *z = BT_NOT_NULL(burnc_sub(y, m));
    bt_expect_f32(z, 2, (const float[]){12, 30}, 0);
    burnc_tensor_release(z);
    burnc_tensor_release(m);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Tensors made before the scope are not the scope's. */
Test(scope, outer_handles_untouched)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_F32, 0, 3, 1));
    burnc_scope_begin();
    burnc_tensor_t *y = BT_NOT_NULL(burnc_neg(x));
    bt_expect_f32(y, 3, (const float[]){0, -1, -2}, 0);
    burnc_scope_end();
    bt_expect_f32(x, 3, (const float[]){0, 1, 2}, 0);
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(scope, nested)
{
    burnc_device_t *dev = bt_ref();
    atomic_int rel_outer = 0, rel_inner = 0, rel_kept = 0;
    static float d_outer[2] = {1, 2}, d_inner[2] = {3, 4}, d_kept[2] = {5, 6};
    const int64_t shape[1] = {2};

    burnc_scope_begin();
    burnc_tensor_t *o = BT_NOT_NULL(burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 1, shape, d_outer, count_release, &rel_outer));
    burnc_scope_begin();
    burnc_tensor_t *i = BT_NOT_NULL(burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 1, shape, d_inner, count_release, &rel_inner));
    burnc_tensor_t *k = BT_NOT_NULL(burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 1, shape, d_kept, count_release, &rel_kept));
    burnc_tensor_keep(k);
    burnc_tensor_t *sum = BT_NOT_NULL(burnc_add(o, i)); /* made in the inner scope */
    bt_expect_f32(sum, 2, (const float[]){4, 6}, 0);
    burnc_scope_end();
    /* The inner scope's handles are gone; the outer one's and the kept one remain. */
    cr_assert_eq(atomic_load(&rel_inner), 1, "inner handle not released by the inner scope");
    cr_assert_eq(atomic_load(&rel_outer), 0, "outer handle released by the inner scope");
    cr_assert_eq(atomic_load(&rel_kept), 0);
    bt_expect_f32(o, 2, (const float[]){1, 2}, 0);
    burnc_scope_end();
    cr_assert_eq(atomic_load(&rel_outer), 1, "outer handle not released by the outer scope");
    /* Kept in the inner scope: out of every scope, the caller's. */
    cr_assert_eq(atomic_load(&rel_kept), 0, "a kept handle was released by an enclosing scope");
    bt_expect_f32(k, 2, (const float[]){5, 6}, 0);
    burnc_tensor_release(k);
    cr_assert_eq(atomic_load(&rel_kept), 1);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Releasing a handle the scope owns leaves it to the scope: no double release. */
Test(scope, release_inside_is_safe)
{
    burnc_device_t *dev = bt_ref();
    atomic_int released = 0;
    static float data[3] = {1, 2, 3};
    burnc_scope_begin();
    burnc_tensor_t *w = BT_NOT_NULL(
        burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){3}, data, count_release, &released));
    burnc_tensor_t *y = BT_NOT_NULL(burnc_mul_scalar(w, 3));
    burnc_tensor_release(y);
    burnc_tensor_release(w);
    burnc_tensor_t *z = BT_NOT_NULL(burnc_add_scalar(w, 1)); /* w is still the scope's */
    bt_expect_f32(z, 3, (const float[]){2, 3, 4}, 0);
    burnc_scope_end();
    BT_ASSERT_OK(burnc_device_sync(dev));
    cr_assert_eq(atomic_load(&released), 1, "release callback ran %d times", atomic_load(&released));
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(scope, keep_outside_scope)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *x = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_I32, 1, (const int64_t[]){3}));
    cr_assert_eq(burnc_tensor_keep(x), x);
    cr_assert_eq(burnc_tensor_keep(x), x); /* twice: still harmless */
    int32_t v[3] = {0};
    BT_ASSERT_OK(burnc_tensor_read(x, v, sizeof v));
    cr_assert(v[0] == 1 && v[1] == 1 && v[2] == 1);
    /* keep inside a later scope of a handle made outside it: still the caller's. */
    burnc_scope_begin();
    burnc_tensor_keep(x);
    burnc_scope_end();
    BT_ASSERT_OK(burnc_tensor_read(x, v, sizeof v));
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Build a graph in a scope, keep the result, read it after the scope: only the kept result
 * needs reading, and afterwards only it (and the inputs) hold memory. */
Test(scope, graph_in_scope)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[2] = {16, 256};
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_F32, 0, 16 * 256, 1));
    burnc_tensor_t *x2 = BT_NOT_NULL(burnc_reshape(x, 2, shape));
    BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_memory_report_t r0 = bt_memory(dev);

    burnc_scope_begin();
    burnc_tensor_t *centered = burnc_sub(x2, burnc_mean(x2, 1, (const int[]){1}, true));
    burnc_tensor_t *scaled = burnc_div_scalar(burnc_mul_scalar(centered, 2.0), 4.0);
    burnc_tensor_t *y = burnc_sum(burnc_abs(scaled), 1, (const int[]){1}, false);
    burnc_tensor_keep(y);
    burnc_scope_end();

    cr_assert_not_null(y, "%s", burnc_error_message());
    float out[16];
    bt_read_f32(y, out, 16);
    /* Each row is c + 0..255; centered values -127.5..127.5; half of |.| sums to
     * 2 * (0.5 + 1.5 + ... + 127.5) / 2 = 128 * 64 = 8192. */
    for (int r = 0; r < 16; r++)
        cr_assert_eq(out[r], 8192.0f, "row %d: %g", r, (double)out[r]);
    burnc_memory_report_t r1 = bt_memory(dev);
    cr_assert_eq(r1.buffers_in_use, r0.buffers_in_use + 1, "buffers in use %llu -> %llu: intermediates survived",
                 (unsigned long long)r0.buffers_in_use, (unsigned long long)r1.buffers_in_use);
    burnc_tensor_release(y);
    burnc_tensor_release(x2);
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Composite ops inside a scope leave nothing behind either. */
Test(scope, composites)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *x = bt_f32(dev, 2, (const int64_t[]){2, 2}, (const float[]){0, 0, 1, 1});
    burnc_memory_report_t r0 = bt_memory(dev);
    burnc_scope_begin();
    burnc_tensor_t *s = burnc_tensor_keep(burnc_softmax(x, 1));
    burnc_tensor_t *ln = burnc_tensor_keep(burnc_layer_norm(x, 1, 1e-5));
    burnc_scope_end();
    bt_expect_f32(s, 4, (const float[]){0.5f, 0.5f, 0.5f, 0.5f}, 1e-6f);
    bt_expect_f32(ln, 4, (const float[]){0, 0, 0, 0}, 1e-6f);
    burnc_memory_report_t r1 = bt_memory(dev);
    cr_assert_eq(r1.buffers_in_use, r0.buffers_in_use + 2, "buffers in use %llu -> %llu",
                 (unsigned long long)r0.buffers_in_use, (unsigned long long)r1.buffers_in_use);
    burnc_tensor_release(ln);
    burnc_tensor_release(s);
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Scopes are per thread: a scope open on this thread does not own another thread's handles. */
typedef struct {
    burnc_device_t *dev;
    burnc_tensor_t *out;
} made;

static int make_in_thread(void *arg)
{
    made *m = arg;
    m->out = burnc_full(m->dev, BURNC_DTYPE_F32, 1, (const int64_t[]){2}, 7.0);
    return 0;
}

Test(scope, per_thread)
{
    burnc_device_t *dev = bt_ref();
    made m = {.dev = dev};
    burnc_scope_begin();
    thrd_t t;
    cr_assert_eq(thrd_create(&t, make_in_thread, &m), thrd_success);
    thrd_join(t, NULL);
    burnc_scope_end();
    cr_assert_not_null(m.out);
    bt_expect_f32(m.out, 2, (const float[]){7, 7}, 0);
    burnc_tensor_release(m.out);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Many handles in one scope (more than any small fixed table). */
Test(scope, many_handles)
{
    burnc_device_t *dev = bt_ref();
    burnc_memory_report_t r0 = bt_memory(dev);
    burnc_tensor_t *x = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){8}));
    burnc_scope_begin();
    burnc_tensor_t *y = x;
    for (int i = 0; i < 5000; i++)
        y = burnc_add_scalar(y, 1);
    burnc_tensor_keep(y);
    burnc_scope_end();
    cr_assert_not_null(y, "%s", burnc_error_message());
    bt_expect_f32(y, 8, (const float[]){5001, 5001, 5001, 5001, 5001, 5001, 5001, 5001}, 0);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_memory_report_t r1 = bt_memory(dev);
    cr_assert_eq(r1.bytes_in_use, r0.bytes_in_use);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}
