/* Programs with two devices: the reference device "ref" and a second, independent one "ref:1".
 * Ops never mix devices (BURNC_ERR_DEVICE_MISMATCH); burnc_tensor_to_device moves data. */
#include <unistd.h>

#include "common.h"

static burnc_device_t *dev0, *dev1;
static burnc_tensor_t *a0, *a1, *idx0;

static void setup(void)
{
    dev0 = bt_ref();
    dev1 = BT_NOT_NULL(burnc_device_open("ref:1"));
    const int64_t shape[2] = {2, 3};
    const float data[6] = {1, 2, 3, 4, 5, 6};
    a0 = bt_f32(dev0, 2, shape, data);
    a1 = bt_f32(dev1, 2, shape, data);
    idx0 = BT_NOT_NULL(burnc_tensor_from_data(dev0, BURNC_DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){1, 0}));
}

static void teardown(void)
{
    burnc_tensor_release(idx0);
    burnc_tensor_release(a1);
    burnc_tensor_release(a0);
    burnc_device_release(dev1);
    burnc_device_release(dev0);
}

TestSuite(multidevice, .init = setup, .fini = teardown);

Test(multidevice, devices_are_distinct)
{
    cr_assert(!burnc_device_equal(dev0, dev1));
    cr_assert_str_eq(burnc_device_spec(dev1), "ref:1");
    burnc_device_t *again = BT_NOT_NULL(burnc_device_open("ref:1"));
    cr_assert(burnc_device_equal(again, dev1));
    burnc_device_release(again);
    /* configuration is per device: dev1 already has a tensor, a fresh ref:2 does not */
    burnc_device_config_t cfg = {.float_dtype = BURNC_DTYPE_F64};
    BT_ASSERT_STATUS(burnc_device_configure(dev1, &cfg), BURNC_ERR_ALREADY_INITIALIZED, "ref:1");
    burnc_device_t *dev2 = BT_NOT_NULL(burnc_device_open("ref:2"));
    BT_ASSERT_OK(burnc_device_configure(dev2, &cfg));
    cr_assert_eq(burnc_device_float_dtype(dev2), BURNC_DTYPE_F64);
    cr_assert_eq(burnc_device_float_dtype(dev0), BURNC_DTYPE_F32);
    burnc_device_release(dev2);
    BT_LEAK_CHECK();
}

Test(multidevice, ops_refuse_two_devices)
{
    BT_ASSERT_FAILS(burnc_add(a0, a1), BURNC_ERR_DEVICE_MISMATCH, "burnc_add: operands live on ref and ref:1");
    BT_ASSERT_FAILS(burnc_mul(a1, a0), BURNC_ERR_DEVICE_MISMATCH, "burnc_mul");
    BT_ASSERT_FAILS(burnc_where(a0, a0, a1), BURNC_ERR_DEVICE_MISMATCH, "burnc_where");
    burnc_tensor_t *t1 = BT_NOT_NULL(burnc_transpose(a1, 0, 1));
    BT_ASSERT_FAILS(burnc_matmul(a0, t1), BURNC_ERR_DEVICE_MISMATCH, "burnc_matmul");
    burnc_tensor_t *pair[2] = {a0, a1};
    BT_ASSERT_FAILS(burnc_cat(2, pair, 0), BURNC_ERR_DEVICE_MISMATCH, "burnc_cat");
    BT_ASSERT_FAILS(burnc_stack(2, pair, 0), BURNC_ERR_DEVICE_MISMATCH, "burnc_cat");
    BT_ASSERT_FAILS(burnc_index_select(a1, 0, idx0), BURNC_ERR_DEVICE_MISMATCH, "burnc_index_select");
    burnc_tensor_release(t1);
    bt_expect_usable(dev0);
    bt_expect_usable(dev1);
    BT_LEAK_CHECK();
}

Test(multidevice, to_device_copies_values_and_views)
{
    burnc_tensor_t *t = BT_NOT_NULL(burnc_transpose(a0, 0, 1)); /* a non-dense view */
    burnc_tensor_t *m = BT_NOT_NULL(burnc_tensor_to_device(t, dev1));
    burnc_device_t *d = burnc_tensor_device(m);
    cr_assert(burnc_device_equal(d, dev1));
    burnc_device_release(d);
    cr_assert_eq(burnc_tensor_rank(m), 2);
    cr_assert_eq(burnc_tensor_shape(m)[0], 3);
    bt_expect_f32(m, 6, (const float[]){1, 4, 2, 5, 3, 6}, 0);
    /* lazy work on the source runs before the copy */
    burnc_tensor_t *e = BT_NOT_NULL(burnc_mul_scalar(a0, 3));
    burnc_tensor_t *me = BT_NOT_NULL(burnc_tensor_to_device(e, dev1));
    burnc_tensor_t *sum = BT_NOT_NULL(burnc_add(me, a1));
    bt_expect_f32(sum, 6, (const float[]){4, 8, 12, 16, 20, 24}, 0);
    /* the same device: a new handle to the same tensor */
    burnc_tensor_t *same = BT_NOT_NULL(burnc_tensor_to_device(a0, dev0));
    cr_assert_neq(same, a0);
    bt_expect_f32(same, 6, (const float[]){1, 2, 3, 4, 5, 6}, 0);
    burnc_tensor_release(same);
    burnc_tensor_release(sum);
    burnc_tensor_release(me);
    burnc_tensor_release(e);
    burnc_tensor_release(m);
    burnc_tensor_release(t);
    BT_LEAK_CHECK();
}

Test(multidevice, to_device_reports_the_source_failure)
{
    burnc_tensor_t *bad = BT_NOT_NULL(
        burnc_tensor_from_data(dev0, BURNC_DTYPE_I64, 1, (int64_t[]){1}, (int64_t[]){7}));
    burnc_tensor_t *g = BT_NOT_NULL(burnc_index_select(a0, 0, bad)); /* index 7 of 2 rows: fails when run */
    BT_ASSERT_FAILS(burnc_tensor_to_device(g, dev1), BURNC_ERR_INDEX, "burnc_index_select");
    BT_ASSERT_STATUS(burnc_device_sync(dev0), BURNC_ERR_INDEX, "index_select");
    BT_ASSERT_OK(burnc_device_sync(dev0)); /* reported once */
    burnc_tensor_release(g);
    burnc_tensor_release(bad);
    bt_expect_usable(dev0);
    BT_LEAK_CHECK();
}

/* burnc_device_write_graph shows the plan of the pending work and runs nothing. */
Test(multidevice, write_graph_plans_without_running)
{
    char path[] = "/tmp/burnc-graph-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    burnc_tensor_t *e = BT_NOT_NULL(burnc_exp(a0));
    burnc_tensor_t *s = BT_NOT_NULL(burnc_softmax(a0, 1));
    burnc_memory_report_t before = bt_memory(dev0);
    BT_ASSERT_OK(burnc_device_write_graph(dev0, path));
    burnc_memory_report_t after = bt_memory(dev0);
    cr_assert_eq(after.buffers_in_use, before.buffers_in_use, "writing the graph ran work");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    cr_assert(strstr(buf, "digraph") != NULL, "not DOT: %s", buf);
    cr_assert(strstr(buf, "exp") != NULL && strstr(buf, "sum") != NULL, "ops missing: %s", buf);
    BT_ASSERT_STATUS(burnc_device_write_graph(dev0, "/nonexistent-dir/x.dot"), BURNC_ERR_EXECUTION,
                     "/nonexistent-dir/x.dot");
    BT_ASSERT_STATUS(burnc_device_write_graph(NULL, path), BURNC_ERR_INVALID_ARGUMENT, "device");
    bt_expect_f32(s, 6, (const float[]){0.0900306f, 0.244728f, 0.665241f, 0.0900306f, 0.244728f, 0.665241f},
                  1e-5f);
    burnc_tensor_release(s);
    burnc_tensor_release(e);
    BT_LEAK_CHECK();
}
