/* Devices: open, enumerate, configure, seed, flush/sync, memory report, to_device, wrap,
 * tensor accessors, and several threads using one device. */
#include <stdatomic.h>
#include <threads.h>

#include "common.h"

static int count_of(unsigned types) { return burnc_device_enumerate(types, NULL, 0); }

/* ---- Opening ----------------------------------------------------------------------------- */

Test(device, open_ref)
{
    burnc_device_t *dev = bt_ref();
    cr_assert_eq(burnc_device_type(dev), BURNC_DEVICE_REF);
    cr_assert_str_eq(burnc_device_spec(dev), "ref");
    cr_assert(burnc_device_name(dev) != NULL && burnc_device_name(dev)[0] != '\0', "empty device name");
    cr_assert_eq(burnc_error_code(), BURNC_OK, "a successful open set an error: %s", burnc_error_message());
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ref and cpu preserve denormals of every dtype; integers and a NULL device never flush. */
Test(device, denormals_preserved_on_ref_and_cpu)
{
    cr_assert(!burnc_device_flushes_denormals(NULL, BURNC_DTYPE_F32));
    burnc_device_t *devs[2] = {bt_ref(), burnc_device_open("cpu")};
    for (int d = 0; d < 2; d++) {
        if (!devs[d])
            continue; /* a build without LLVM has no cpu device */
        for (int dt = BURNC_DTYPE_F32; dt <= BURNC_DTYPE_BOOL; dt++)
            cr_assert(!burnc_device_flushes_denormals(devs[d], (burnc_dtype_t)dt), "%s flushes %s",
                      burnc_device_spec(devs[d]), burnc_dtype_name((burnc_dtype_t)dt));
        burnc_device_release(devs[d]);
    }
    burnc_error_clear();
    BT_LEAK_CHECK();
}

/* The default (NULL or "") is ref on a machine where no other backend is available. */
Test(device, open_default)
{
    unsetenv("BURNC_DEVICE");
    burnc_device_t *a = BT_NOT_NULL(burnc_device_open(NULL));
    burnc_device_t *b = BT_NOT_NULL(burnc_device_open(""));
    cr_assert(burnc_device_equal(a, b), "NULL and \"\" opened different devices");
    burnc_device_type_t want;
    if (count_of(BURNC_DEVICE_CUDA) > 0)
        want = BURNC_DEVICE_CUDA;
    else if (count_of(BURNC_DEVICE_VULKAN) > 0)
        want = 0; /* a Vulkan GPU or, without one, cpu: not decidable from the list alone */
    else if (count_of(BURNC_DEVICE_CPU) > 0)
        want = BURNC_DEVICE_CPU;
    else
        want = BURNC_DEVICE_REF;
    if (want != 0)
        cr_assert_eq(burnc_device_type(a), want, "default device is %s", burnc_device_spec(a));
    if (want == BURNC_DEVICE_REF) {
        burnc_device_t *r = bt_ref();
        cr_assert(burnc_device_equal(a, r));
        burnc_device_release(r);
    }
    burnc_device_release(b);
    burnc_device_release(a);
    BT_LEAK_CHECK();
}

Test(device, default_from_environment)
{
    setenv("BURNC_DEVICE", "ref", 1);
    burnc_device_t *a = BT_NOT_NULL(burnc_device_open(NULL));
    cr_assert_eq(burnc_device_type(a), BURNC_DEVICE_REF, "BURNC_DEVICE=ref gave %s", burnc_device_spec(a));
    burnc_device_release(a);
    /* A device that is not here: the default follows the variable and fails like the spec. */
    if (count_of(BURNC_DEVICE_CUDA) == 0) {
        setenv("BURNC_DEVICE", "cuda:0", 1);
        BT_ASSERT_FAILS(burnc_device_open(NULL), BURNC_ERR_UNAVAILABLE, "cuda");
        BT_ASSERT_FAILS(burnc_device_open(""), BURNC_ERR_UNAVAILABLE, "cuda");
    }
    unsetenv("BURNC_DEVICE");
    BT_LEAK_CHECK();
}

Test(device, same_spec_same_device)
{
    burnc_device_t *a = bt_ref();
    burnc_device_t *b = bt_ref();
    cr_assert(burnc_device_equal(a, b));
    cr_assert(burnc_device_equal(a, a));
    /* Configuration is shared: configure through one handle, observe through the other. */
    burnc_device_config_t cfg = {.float_dtype = BURNC_DTYPE_F64};
    BT_ASSERT_OK(burnc_device_configure(a, &cfg));
    cr_assert_eq(burnc_device_float_dtype(b), BURNC_DTYPE_F64);
    burnc_tensor_t *t = BT_NOT_NULL(burnc_zeros(b, BURNC_DTYPE_DEFAULT, 0, NULL));
    cr_assert_eq(burnc_tensor_dtype(t), BURNC_DTYPE_F64);
    /* The first tensor locks configuration for every handle. */
    BT_ASSERT_STATUS(burnc_device_configure(a, &cfg), BURNC_ERR_ALREADY_INITIALIZED, "configure");
    /* retain gives another handle to the same device. */
    burnc_device_t *c = BT_NOT_NULL(burnc_device_retain(a));
    cr_assert(burnc_device_equal(c, b));
    burnc_device_release(c);
    burnc_tensor_release(t);
    burnc_device_release(b);
    burnc_device_release(a);
    burnc_device_release(NULL); /* ignored */
    BT_LEAK_CHECK();
}

/* A tensor keeps its device open after the last device handle goes. */
Test(device, tensor_keeps_device)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[1] = {2};
    burnc_tensor_t *t = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_F32, 1, shape, 4.5));
    burnc_device_release(dev);
    burnc_tensor_t *y = BT_NOT_NULL(burnc_mul_scalar(t, 2.0));
    bt_expect_f32(y, 2, (const float[]){9, 9}, 0);
    burnc_device_t *d2 = BT_NOT_NULL(burnc_tensor_device(y));
    cr_assert_eq(burnc_device_type(d2), BURNC_DEVICE_REF);
    burnc_device_release(d2);
    burnc_tensor_release(y);
    burnc_tensor_release(t);
    BT_LEAK_CHECK();
}

/* ---- Enumeration ------------------------------------------------------------------------- */

Test(device, enumerate)
{
    burnc_device_info_t info[16];
    int n = burnc_device_enumerate(BURNC_DEVICE_ALL, info, 16);
    cr_assert(n >= 1 && n <= 16, "enumerate(ALL) gave %d", n);
    bool ref_listed = false;
    for (int i = 0; i < n; i++) {
        cr_assert(info[i].spec[0] != '\0' && info[i].name[0] != '\0', "entry %d is empty", i);
        if (info[i].type == BURNC_DEVICE_REF && strcmp(info[i].spec, "ref") == 0)
            ref_listed = true;
        /* Every listed device opens, with the listed type and spec. */
        burnc_device_t *d = burnc_device_open(info[i].spec);
        cr_assert_not_null(d, "listed device %s does not open: %s", info[i].spec, burnc_error_message());
        cr_assert_eq(burnc_device_type(d), info[i].type, "%s", info[i].spec);
        cr_assert_str_eq(burnc_device_spec(d), info[i].spec);
        burnc_device_release(d);
    }
    cr_assert(ref_listed, "ref is not listed");

    /* Filters. */
    int nref = burnc_device_enumerate(BURNC_DEVICE_REF, info, 16);
    cr_assert_eq(nref, 1, "enumerate(REF) gave %d", nref);
    cr_assert_eq(info[0].type, BURNC_DEVICE_REF);
    const unsigned kinds[3] = {BURNC_DEVICE_CPU, BURNC_DEVICE_CUDA, BURNC_DEVICE_VULKAN};
    int total = nref;
    for (int k = 0; k < 3; k++) {
        int m = burnc_device_enumerate(kinds[k], info, 16);
        cr_assert(m >= 0 && m <= 16);
        for (int i = 0; i < m; i++)
            cr_assert_eq((unsigned)info[i].type, kinds[k], "filter %u listed %s", kinds[k], info[i].spec);
        total += m;
    }
    cr_assert_eq(total, n, "the filtered counts do not add up to enumerate(ALL)");
    int nocpu = burnc_device_enumerate(BURNC_DEVICE_ALL & ~BURNC_DEVICE_REF, NULL, 0);
    cr_assert_eq(nocpu, n - 1);
    cr_assert_eq(burnc_device_enumerate(0, NULL, 0), 0);

    /* A capacity smaller than the count: the count, and nothing written past capacity. */
    burnc_device_info_t small[2];
    memset(small, 0x5a, sizeof small);
    cr_assert_eq(burnc_device_enumerate(BURNC_DEVICE_ALL, small, 1), n);
    cr_assert(small[0].spec[0] != '\0' && small[0].spec[0] != 0x5a);
    const unsigned char *tail = (const unsigned char *)&small[1];
    for (size_t i = 0; i < sizeof small[1]; i++)
        cr_assert_eq(tail[i], 0x5a, "enumerate wrote past its capacity");
    BT_LEAK_CHECK();
}

/* ---- Configuration ----------------------------------------------------------------------- */

Test(device, default_dtypes)
{
    burnc_device_t *dev = bt_ref();
    cr_assert_eq(burnc_device_float_dtype(dev), BURNC_DTYPE_F32);
    cr_assert_eq(burnc_device_int_dtype(dev), BURNC_DTYPE_I64);
    burnc_tensor_t *z = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_DEFAULT, 1, (const int64_t[]){3}));
    burnc_tensor_t *r = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_DEFAULT, 0, 5, 1));
    burnc_tensor_t *rf = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_DEFAULT, 0, 1, 0.25));
    cr_assert_eq(burnc_tensor_dtype(z), BURNC_DTYPE_F32);
    cr_assert_eq(burnc_tensor_dtype(r), BURNC_DTYPE_I64);
    cr_assert_eq(burnc_tensor_dtype(rf), BURNC_DTYPE_F32);
    int64_t ri[5];
    BT_ASSERT_OK(burnc_tensor_read(r, ri, sizeof ri));
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ri[i], i);
    burnc_tensor_release(rf);
    burnc_tensor_release(r);
    burnc_tensor_release(z);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(device, configure_f64_i32)
{
    burnc_device_t *dev = bt_ref();
    burnc_device_config_t cfg = {.float_dtype = BURNC_DTYPE_F64, .int_dtype = BURNC_DTYPE_I32};
    BT_ASSERT_OK(burnc_device_configure(dev, &cfg));
    cr_assert_eq(burnc_device_float_dtype(dev), BURNC_DTYPE_F64);
    cr_assert_eq(burnc_device_int_dtype(dev), BURNC_DTYPE_I32);

    const int64_t shape[2] = {2, 2};
    burnc_tensor_t *z = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_DEFAULT, 2, shape));
    burnc_tensor_t *o = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_DEFAULT, 2, shape));
    burnc_tensor_t *f = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_DEFAULT, 2, shape, 0.1));
    burnc_tensor_t *u = BT_NOT_NULL(burnc_rand(dev, BURNC_DTYPE_DEFAULT, 2, shape));
    burnc_tensor_t *ri = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_DEFAULT, 0, 4, 1));
    burnc_tensor_t *rf = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_DEFAULT, 0, 2, 0.5));
    cr_assert_eq(burnc_tensor_dtype(z), BURNC_DTYPE_F64);
    cr_assert_eq(burnc_tensor_dtype(o), BURNC_DTYPE_F64);
    cr_assert_eq(burnc_tensor_dtype(f), BURNC_DTYPE_F64);
    cr_assert_eq(burnc_tensor_dtype(u), BURNC_DTYPE_F64);
    cr_assert_eq(burnc_tensor_dtype(ri), BURNC_DTYPE_I32);
    cr_assert_eq(burnc_tensor_dtype(rf), BURNC_DTYPE_F64);

    double fd[4];
    BT_ASSERT_OK(burnc_tensor_read(f, fd, sizeof fd));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(fd[i], 0.1, "full(DEFAULT, 0.1) is not the f64 0.1: %.17g", fd[i]);
    int32_t id[4];
    BT_ASSERT_OK(burnc_tensor_read(ri, id, sizeof id));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(id[i], i);
    double rd[4];
    BT_ASSERT_OK(burnc_tensor_read(rf, rd, sizeof rd));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(rd[i], 0.5 * i);

    /* Float math on an integer tensor computes in the default float dtype. */
    burnc_tensor_t *e = BT_NOT_NULL(burnc_exp(ri));
    cr_assert_eq(burnc_tensor_dtype(e), BURNC_DTYPE_F64);
    /* Integer sums give i64 whatever the default. */
    burnc_tensor_t *s = BT_NOT_NULL(burnc_sum(ri, 0, NULL, false));
    cr_assert_eq(burnc_tensor_dtype(s), BURNC_DTYPE_I64);
    int64_t sv = 0;
    BT_ASSERT_OK(burnc_tensor_read(s, &sv, sizeof sv));
    cr_assert_eq(sv, 6);

    burnc_tensor_t *ts[] = {z, o, f, u, ri, rf, e, s};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        burnc_tensor_release(ts[i]);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Zero fields keep the defaults. */
Test(device, configure_partial)
{
    burnc_device_t *dev = bt_ref();
    burnc_device_config_t cfg = {.int_dtype = BURNC_DTYPE_I32};
    BT_ASSERT_OK(burnc_device_configure(dev, &cfg));
    cr_assert_eq(burnc_device_float_dtype(dev), BURNC_DTYPE_F32);
    cr_assert_eq(burnc_device_int_dtype(dev), BURNC_DTYPE_I32);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(device, configure_after_first_tensor)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *t = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 1, (const int64_t[]){4}));
    burnc_device_config_t cfg = {.float_dtype = BURNC_DTYPE_F64};
    BT_ASSERT_STATUS(burnc_device_configure(dev, &cfg), BURNC_ERR_ALREADY_INITIALIZED, "configure");
    cr_assert_eq(burnc_device_float_dtype(dev), BURNC_DTYPE_F32, "a refused configure changed the default");
    /* Still locked after that tensor is gone. */
    burnc_tensor_release(t);
    BT_ASSERT_STATUS(burnc_device_configure(dev, &cfg), BURNC_ERR_ALREADY_INITIALIZED, "configure");
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(device, configure_wrong_dtypes)
{
    burnc_device_t *dev = bt_ref();
    const burnc_device_config_t bad[] = {
        {.float_dtype = BURNC_DTYPE_I32},
        {.float_dtype = BURNC_DTYPE_I64},
        {.float_dtype = BURNC_DTYPE_U8},
        {.float_dtype = BURNC_DTYPE_BOOL},
        {.int_dtype = BURNC_DTYPE_F32},
        {.int_dtype = BURNC_DTYPE_F64},
        {.int_dtype = BURNC_DTYPE_BOOL},
        {.int_dtype = BURNC_DTYPE_U8},
        {.float_dtype = (burnc_dtype_t)99},
        {.int_dtype = (burnc_dtype_t)-3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        burnc_error_clear();
        burnc_status_t s = burnc_device_configure(dev, &bad[i]);
        cr_assert_eq(s, BURNC_ERR_UNSUPPORTED_DTYPE, "config %zu (float %d, int %d) gave %s", i,
                     (int)bad[i].float_dtype, (int)bad[i].int_dtype, burnc_status_name(s));
        cr_assert_eq(burnc_error_code(), BURNC_ERR_UNSUPPORTED_DTYPE);
        cr_assert(burnc_error_message()[0] != '\0');
    }
    /* Refused configurations changed nothing and did not lock the device. */
    cr_assert_eq(burnc_device_float_dtype(dev), BURNC_DTYPE_F32);
    cr_assert_eq(burnc_device_int_dtype(dev), BURNC_DTYPE_I64);
    burnc_device_config_t good = {.float_dtype = BURNC_DTYPE_F16};
    BT_ASSERT_OK(burnc_device_configure(dev, &good));
    cr_assert_eq(burnc_device_float_dtype(dev), BURNC_DTYPE_F16);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(device, supports_dtype)
{
    burnc_device_t *dev = bt_ref();
    const burnc_dtype_t all[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                 BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8,  BURNC_DTYPE_BOOL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cr_assert(burnc_device_supports_dtype(dev, all[i]), "ref does not support %s", burnc_dtype_name(all[i]));
    cr_assert_not(burnc_device_supports_dtype(dev, (burnc_dtype_t)99));
    cr_assert_not(burnc_device_supports_dtype(NULL, BURNC_DTYPE_F32));
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Random numbers ---------------------------------------------------------------------- */

enum { NRAND = 1000 };

static void draw(burnc_device_t *dev, bool normal, burnc_dtype_t dt, double *out)
{
    const int64_t shape[2] = {10, NRAND / 10};
    burnc_tensor_t *t = BT_NOT_NULL(normal ? burnc_randn(dev, dt, 2, shape) : burnc_rand(dev, dt, 2, shape));
    cr_assert_eq(burnc_tensor_dtype(t), dt);
    if (dt == BURNC_DTYPE_F64) {
        BT_ASSERT_OK(burnc_tensor_read(t, out, NRAND * sizeof(double)));
    } else {
        float f[NRAND];
        BT_ASSERT_OK(burnc_tensor_read(t, f, sizeof f));
        for (int i = 0; i < NRAND; i++)
            out[i] = f[i];
    }
    burnc_tensor_release(t);
}

static bool same(const double *a, const double *b) { return memcmp(a, b, NRAND * sizeof(double)) == 0; }

static void check_seeding(bool normal, burnc_dtype_t dt)
{
    static double a[NRAND], a2[NRAND], b[NRAND], c[NRAND];
    burnc_device_t *dev = bt_ref();
    BT_ASSERT_OK(burnc_device_seed(dev, 42));
    draw(dev, normal, dt, a);
    draw(dev, normal, dt, a2);
    BT_ASSERT_OK(burnc_device_seed(dev, 42));
    draw(dev, normal, dt, b);
    BT_ASSERT_OK(burnc_device_seed(dev, 43));
    draw(dev, normal, dt, c);
    cr_assert(same(a, b), "the same seed gave different values");
    cr_assert_not(same(a, c), "seeds 42 and 43 gave the same values");
    cr_assert_not(same(a, a2), "a second draw repeated the first");

    double sum = 0, sq = 0;
    int distinct = 0;
    for (int i = 0; i < NRAND; i++) {
        cr_assert(isfinite(a[i]), "element %d is %g", i, a[i]);
        if (!normal)
            cr_assert(a[i] >= 0.0 && a[i] < 1.0, "uniform element %d is %.17g", i, a[i]);
        sum += a[i];
        sq += a[i] * a[i];
        distinct += i > 0 && a[i] != a[i - 1];
    }
    double mean = sum / NRAND, var = sq / NRAND - mean * mean;
    cr_assert(distinct > NRAND / 2, "too few distinct values");
    /* Loose moments: 1000 draws, several standard errors of slack. */
    if (normal) {
        cr_assert(fabs(mean) < 0.15 && fabs(var - 1.0) < 0.2, "randn mean %g var %g", mean, var);
    } else {
        cr_assert(fabs(mean - 0.5) < 0.05 && fabs(var - 1.0 / 12) < 0.02, "rand mean %g var %g", mean, var);
    }

    /* The seed is the device's: another handle to it sees the same stream. */
    burnc_device_t *other = bt_ref();
    BT_ASSERT_OK(burnc_device_seed(other, 42));
    draw(dev, normal, dt, b);
    cr_assert(same(a, b), "seeding through a second handle did not restart the stream");
    burnc_device_release(other);
    burnc_device_release(dev);
}

Test(device, seed_rand_f32) { check_seeding(false, BURNC_DTYPE_F32); BT_LEAK_CHECK(); }
Test(device, seed_randn_f32) { check_seeding(true, BURNC_DTYPE_F32); BT_LEAK_CHECK(); }
Test(device, seed_rand_f64) { check_seeding(false, BURNC_DTYPE_F64); BT_LEAK_CHECK(); }
Test(device, seed_randn_f64) { check_seeding(true, BURNC_DTYPE_F64); BT_LEAK_CHECK(); }

/* Values are fixed when the op is recorded, not when the work runs: reading the draws in
 * another order changes nothing. */
Test(device, rand_fixed_at_record_time)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[1] = {64};
    float a1[64], a2[64], b1[64], b2[64];
    BT_ASSERT_OK(burnc_device_seed(dev, 7));
    burnc_tensor_t *x = BT_NOT_NULL(burnc_rand(dev, BURNC_DTYPE_F32, 1, shape));
    burnc_tensor_t *y = BT_NOT_NULL(burnc_rand(dev, BURNC_DTYPE_F32, 1, shape));
    BT_ASSERT_OK(burnc_tensor_read(x, a1, sizeof a1));
    BT_ASSERT_OK(burnc_tensor_read(y, a2, sizeof a2));
    burnc_tensor_release(x);
    burnc_tensor_release(y);
    BT_ASSERT_OK(burnc_device_seed(dev, 7));
    x = BT_NOT_NULL(burnc_rand(dev, BURNC_DTYPE_F32, 1, shape));
    y = BT_NOT_NULL(burnc_rand(dev, BURNC_DTYPE_F32, 1, shape));
    BT_ASSERT_OK(burnc_tensor_read(y, b2, sizeof b2));
    BT_ASSERT_OK(burnc_tensor_read(x, b1, sizeof b1));
    cr_assert_arr_eq(a1, b1, sizeof a1);
    cr_assert_arr_eq(a2, b2, sizeof a2);
    burnc_tensor_release(x);
    burnc_tensor_release(y);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Flush, sync, memory ----------------------------------------------------------------- */


Test(device, flush_sync)
{
    burnc_device_t *dev = bt_ref();
    BT_ASSERT_OK(burnc_device_flush(dev)); /* nothing pending */
    BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_F32, 0, 4, 1));
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(burnc_add_scalar(burnc_mul_scalar(x, 3.0), 1.0)));
    burnc_scope_end();
    BT_ASSERT_OK(burnc_device_flush(dev));
    BT_ASSERT_OK(burnc_device_sync(dev));
    BT_ASSERT_OK(burnc_device_sync(dev));
    bt_expect_f32(y, 4, (const float[]){1, 4, 7, 10}, 0);
    /* Work recorded after a sync runs at the next one. */
    burnc_tensor_t *z = BT_NOT_NULL(burnc_neg(y));
    BT_ASSERT_OK(burnc_device_sync(dev));
    bt_expect_f32(z, 4, (const float[]){-1, -4, -7, -10}, 0);
    burnc_tensor_release(z);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

static void check_report(const burnc_memory_report_t *r)
{
    cr_assert(r->bytes_peak >= r->bytes_in_use + r->bytes_cached, "peak %llu < in use %llu + cached %llu",
              (unsigned long long)r->bytes_peak, (unsigned long long)r->bytes_in_use,
              (unsigned long long)r->bytes_cached);
    cr_assert(r->bytes_in_use >= r->buffers_in_use, "in use %llu bytes in %llu buffers",
              (unsigned long long)r->bytes_in_use, (unsigned long long)r->buffers_in_use);
}

Test(device, memory_report)
{
    burnc_device_t *dev = bt_ref();
    const uint64_t nb = (uint64_t)1 << 18; /* bytes of each tensor below */
    const int64_t shape[1] = {(int64_t)(nb / sizeof(float))};
    burnc_memory_report_t r0 = bt_memory(dev);
    check_report(&r0);

    burnc_tensor_t *x = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 1, shape));
    BT_ASSERT_OK(burnc_device_sync(dev)); /* held: materialized */
    burnc_memory_report_t r1 = bt_memory(dev);
    check_report(&r1);
    cr_assert(r1.bytes_in_use >= r0.bytes_in_use + nb, "in use %llu -> %llu after a %llu-byte tensor",
              (unsigned long long)r0.bytes_in_use, (unsigned long long)r1.bytes_in_use, (unsigned long long)nb);
    cr_assert(r1.buffers_in_use >= r0.buffers_in_use + 1);

    burnc_tensor_t *y = BT_NOT_NULL(burnc_add_scalar(x, 1.0));
    burnc_tensor_t *y0 = BT_NOT_NULL(burnc_slice(y, 0, 0, 1, 1)); /* a view: no new buffer */
    float first = 0;
    BT_ASSERT_OK(burnc_tensor_read(y0, &first, sizeof first));
    burnc_memory_report_t r2 = bt_memory(dev);
    check_report(&r2);
    cr_assert_eq(first, 1.0f);
    cr_assert(r2.bytes_in_use >= r1.bytes_in_use + nb);
    cr_assert(r2.bytes_peak >= r1.bytes_peak);

    /* y's storage stays while the view y0 uses it; x's goes at once. */
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_memory_report_t r3 = bt_memory(dev);
    check_report(&r3);
    cr_assert(r3.bytes_in_use <= r2.bytes_in_use - nb, "in use %llu -> %llu after releasing a tensor",
              (unsigned long long)r2.bytes_in_use, (unsigned long long)r3.bytes_in_use);
    cr_assert(r3.bytes_in_use >= r0.bytes_in_use + nb, "a view's storage was freed under it");
    cr_assert(r3.bytes_peak >= r2.bytes_in_use);
    burnc_tensor_release(y0);
    r3 = bt_memory(dev);
    check_report(&r3);
    cr_assert_eq(r3.bytes_in_use, r0.bytes_in_use, "in use %llu at start, %llu after releasing everything",
                 (unsigned long long)r0.bytes_in_use, (unsigned long long)r3.bytes_in_use);

    BT_ASSERT_OK(burnc_device_memory_cleanup(dev));
    burnc_memory_report_t r4 = bt_memory(dev);
    check_report(&r4);
    cr_assert_eq(r4.bytes_cached, 0, "%llu bytes still cached after cleanup", (unsigned long long)r4.bytes_cached);
    cr_assert_eq(r4.bytes_in_use, r3.bytes_in_use);
    cr_assert(r4.bytes_peak >= r3.bytes_peak);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Intermediates of a chain are freed once it has run; what the caller holds stays. */
Test(device, memory_returns_to_start)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[2] = {64, 256};
    const uint64_t nb = 64 * 256 * sizeof(double);
    burnc_memory_report_t r0 = bt_memory(dev);
    burnc_tensor_t *a = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F64, 2, shape));
    burnc_tensor_t *b = BT_NOT_NULL(burnc_mul_scalar(a, 2.0));
    burnc_tensor_t *s = BT_NOT_NULL(burnc_sum(b, 0, NULL, false));
    double v = 0;
    BT_ASSERT_OK(burnc_tensor_read(s, &v, sizeof v));
    cr_assert_eq(v, 2.0 * 64 * 256);
    burnc_memory_report_t r1 = bt_memory(dev);
    check_report(&r1);
    cr_assert(r1.bytes_in_use >= r0.bytes_in_use + 2 * nb);
    cr_assert(r1.buffers_in_use >= r0.buffers_in_use + 3);
    cr_assert(r1.bytes_peak >= r0.bytes_in_use + 2 * nb);
    burnc_tensor_release(s);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    burnc_memory_report_t r2 = bt_memory(dev);
    check_report(&r2);
    cr_assert_eq(r2.bytes_in_use, r0.bytes_in_use, "in use %llu at start, %llu after releasing everything",
                 (unsigned long long)r0.bytes_in_use, (unsigned long long)r2.bytes_in_use);
    cr_assert_eq(r2.buffers_in_use, r0.buffers_in_use);
    BT_ASSERT_OK(burnc_device_memory_cleanup(dev));
    burnc_memory_report_t r3 = bt_memory(dev);
    cr_assert_eq(r3.bytes_cached, 0);
    cr_assert(r3.bytes_peak >= r1.bytes_in_use);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- to_device, wrap ---------------------------------------------------------------------- */

Test(device, to_device_same)
{
    burnc_device_t *dev = bt_ref();
    burnc_device_t *dev2 = bt_ref();
    const int64_t shape[2] = {2, 2};
    burnc_tensor_t *x = bt_f32(dev, 2, shape, (const float[]){1, 2, 3, 4});
    burnc_tensor_t *y = BT_NOT_NULL(burnc_tensor_to_device(x, dev2));
    cr_assert_eq(burnc_tensor_rank(y), 2);
    cr_assert_eq(burnc_tensor_shape(y)[0], 2);
    cr_assert_eq(burnc_tensor_shape(y)[1], 2);
    burnc_device_t *yd = BT_NOT_NULL(burnc_tensor_device(y));
    cr_assert(burnc_device_equal(yd, dev));
    burnc_device_release(yd);
    bt_expect_f32(y, 4, (const float[]){1, 2, 3, 4}, 0);
    /* Pending work is run (or carried) by to_device. */
    burnc_tensor_t *e = BT_NOT_NULL(burnc_mul(x, x));
    burnc_tensor_t *z = BT_NOT_NULL(burnc_tensor_to_device(e, dev));
    bt_expect_f32(z, 4, (const float[]){1, 4, 9, 16}, 0);
    burnc_tensor_release(z);
    burnc_tensor_release(e);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_device_release(dev2);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

static void count_release(void *user) { atomic_fetch_add((atomic_int *)user, 1); }

Test(device, wrap_reads_caller_memory)
{
    burnc_device_t *dev = bt_ref();
    static float data[6] = {1, 2, 3, 4, 5, 6};
    atomic_int released = 0;
    const int64_t shape[2] = {2, 3};
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 2, shape, data, count_release, &released));
    cr_assert_eq(atomic_load(&released), 0, "release ran while the tensor is alive");
    /* The header asks callers to leave the memory unchanged; this test breaks that on purpose,
     * on a device that reads host memory, to see that no copy was made. */
    if (burnc_device_type(dev) == BURNC_DEVICE_REF || burnc_device_type(dev) == BURNC_DEVICE_CPU) {
        data[4] = 50;
        bt_expect_f32(t, 6, (const float[]){1, 2, 3, 4, 50, 6}, 0);
    }
    burnc_tensor_t *y = BT_NOT_NULL(burnc_add_scalar(t, 1));
    bt_expect_f32(y, 6, (const float[]){2, 3, 4, 5, 51, 7}, 0);
    cr_assert_eq(data[0], 1.0f, "an op wrote into wrapped memory");
    burnc_tensor_release(y);
    burnc_tensor_release(t);
    cr_assert_eq(atomic_load(&released), 1);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* The release callback runs exactly once, after the last handle, view and pending op using the
 * memory are gone. */
Test(device, wrap_release_once)
{
    burnc_device_t *dev = bt_ref();
    float *data = malloc(12 * sizeof(float));
    cr_assert_not_null(data);
    for (int i = 0; i < 12; i++)
        data[i] = (float)i;
    atomic_int released = 0;
    const int64_t shape[2] = {3, 4};
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_wrap(dev, BURNC_DTYPE_F32, 2, shape, data, count_release, &released));
    burnc_tensor_t *t2 = BT_NOT_NULL(burnc_tensor_retain(t));
    cr_assert_eq(t2, t);
    burnc_tensor_release(t);
    cr_assert_eq(atomic_load(&released), 0, "release ran with a handle left");
    burnc_tensor_t *v = BT_NOT_NULL(burnc_transpose(t2, 0, 1)); /* a view of the same memory */
    burnc_tensor_release(t2);
    cr_assert_eq(atomic_load(&released), 0, "release ran with a view left");
    burnc_tensor_t *y = BT_NOT_NULL(burnc_mul_scalar(v, 2.0)); /* pending: reads the memory */
    burnc_tensor_release(v);
    cr_assert_eq(atomic_load(&released), 0, "release ran with a pending op reading the memory");
    float out[12];
    bt_read_f32(y, out, 12);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            cr_assert_eq(out[r * 3 + c], 2.0f * (float)(c * 4 + r));
    burnc_tensor_release(y);
    BT_ASSERT_OK(burnc_device_sync(dev));
    cr_assert_eq(atomic_load(&released), 1, "release ran %d times", atomic_load(&released));
    free(data);
    burnc_device_release(dev);
    cr_assert_eq(atomic_load(&released), 1);
    BT_LEAK_CHECK();
}

Test(device, wrap_without_callback)
{
    burnc_device_t *dev = bt_ref();
    int32_t data[4] = {7, -3, 0, 12};
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_wrap(dev, BURNC_DTYPE_I32, 1, (const int64_t[]){4}, data, NULL, NULL));
    burnc_tensor_t *m = BT_NOT_NULL(burnc_max(t, 0, NULL, false));
    int32_t v = 0;
    BT_ASSERT_OK(burnc_tensor_read(m, &v, sizeof v));
    cr_assert_eq(v, 12);
    burnc_tensor_release(m);
    burnc_tensor_release(t);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Accessors --------------------------------------------------------------------------- */

Test(device, accessors)
{
    burnc_device_t *dev = bt_ref();
    const int64_t shape[3] = {2, 3, 4};
    burnc_tensor_t *t = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_I32, 3, shape));
    cr_assert_eq(burnc_tensor_rank(t), 3);
    cr_assert_arr_eq(burnc_tensor_shape(t), shape, sizeof shape);
    cr_assert_arr_eq(burnc_tensor_strides(t), ((const int64_t[]){12, 4, 1}), 3 * sizeof(int64_t));
    cr_assert_eq(burnc_tensor_numel(t), 24);
    cr_assert_eq(burnc_tensor_dtype(t), BURNC_DTYPE_I32);
    burnc_device_t *d = BT_NOT_NULL(burnc_tensor_device(t));
    cr_assert(burnc_device_equal(d, dev));
    burnc_device_release(d);

    /* A transpose is a view: permuted shape and strides. */
    burnc_tensor_t *tt = BT_NOT_NULL(burnc_transpose(t, 0, 2));
    cr_assert_arr_eq(burnc_tensor_shape(tt), ((const int64_t[]){4, 3, 2}), 3 * sizeof(int64_t));
    cr_assert_arr_eq(burnc_tensor_strides(tt), ((const int64_t[]){1, 4, 12}), 3 * sizeof(int64_t));
    cr_assert_eq(burnc_tensor_numel(tt), 24);
    /* contiguous makes it dense again. */
    burnc_tensor_t *tc = BT_NOT_NULL(burnc_contiguous(tt));
    cr_assert_arr_eq(burnc_tensor_strides(tc), ((const int64_t[]){6, 2, 1}), 3 * sizeof(int64_t));

    /* Rank 0 and empty tensors. */
    burnc_tensor_t *s = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_F64, 0, NULL, 2.5));
    cr_assert_eq(burnc_tensor_rank(s), 0);
    cr_assert_eq(burnc_tensor_numel(s), 1);
    double sv = 0;
    BT_ASSERT_OK(burnc_tensor_read(s, &sv, sizeof sv));
    cr_assert_eq(sv, 2.5);
    burnc_tensor_t *e = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 2, (const int64_t[]){0, 3}));
    cr_assert_eq(burnc_tensor_numel(e), 0);
    cr_assert_eq(burnc_tensor_shape(e)[0], 0);
    cr_assert_eq(burnc_tensor_shape(e)[1], 3);
    float dummy[1];
    BT_ASSERT_OK(burnc_tensor_read(e, dummy, 0));

    burnc_tensor_release(e);
    burnc_tensor_release(s);
    burnc_tensor_release(tc);
    burnc_tensor_release(tt);
    burnc_tensor_release(t);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(device, dtype_info)
{
    const struct {
        burnc_dtype_t dt;
        size_t size;
        const char *name;
    } want[] = {
        {BURNC_DTYPE_F32, 4, "f32"}, {BURNC_DTYPE_F64, 8, "f64"}, {BURNC_DTYPE_F16, 2, "f16"},
        {BURNC_DTYPE_BF16, 2, "bf16"}, {BURNC_DTYPE_I32, 4, "i32"}, {BURNC_DTYPE_I64, 8, "i64"},
        {BURNC_DTYPE_U8, 1, "u8"}, {BURNC_DTYPE_BOOL, 1, "bool"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_assert_eq(burnc_dtype_size(want[i].dt), want[i].size, "%s", want[i].name);
        cr_assert_str_eq(burnc_dtype_name(want[i].dt), want[i].name);
    }
    cr_assert_not_null(burnc_dtype_name((burnc_dtype_t)99));
    cr_assert_not_null(burnc_version());
    int major, minor, patch;
    cr_assert_eq(sscanf(burnc_version(), "%d.%d.%d", &major, &minor, &patch), 3, "version \"%s\"", burnc_version());
    BT_LEAK_CHECK();
}

/* ---- Threads ----------------------------------------------------------------------------- */

enum { NTHREADS = 4, NITER = 200, NELEM = 64 };

typedef struct job {
    burnc_tensor_t *shared; /* pending when the threads start: they race to run it */
    int id;
    bool own_handle; /* open a handle of its own instead of using the tensor's device */
    int failures;
    char why[256];
} job;

static int worker(void *arg)
{
    job *j = arg;
    burnc_device_t *dev = j->own_handle ? burnc_device_open("ref") : burnc_tensor_device(j->shared);
    if (!dev) {
        j->failures++;
        snprintf(j->why, sizeof j->why, "open: %s", burnc_error_message());
        return 0;
    }
    const int64_t shape[1] = {NELEM};
    for (int it = 0; it < NITER; it++) {
        burnc_scope_begin();
        burnc_tensor_t *x = burnc_full(dev, BURNC_DTYPE_F32, 1, shape, j->id);
        burnc_tensor_t *y = burnc_add(burnc_mul_scalar(x, it), j->shared);
        burnc_tensor_t *s = burnc_tensor_keep(burnc_sum(y, 0, NULL, false));
        burnc_scope_end();
        float got = -1, sh[NELEM] = {0};
        burnc_status_t st = s ? burnc_tensor_read(s, &got, sizeof got) : burnc_error_code();
        if (st == BURNC_OK)
            st = burnc_tensor_read(j->shared, sh, sizeof sh);
        float want = (float)(NELEM * j->id * it) + (float)(NELEM * (NELEM - 1) / 2);
        if (st != BURNC_OK || got != want || sh[5] != 5.0f || sh[NELEM - 1] != (float)(NELEM - 1)) {
            j->failures++;
            snprintf(j->why, sizeof j->why, "thread %d iteration %d: status %s, sum %g, expected %g (%s)", j->id,
                     it, burnc_status_name(st), (double)got, (double)want, burnc_error_message());
        }
        burnc_tensor_release(s);
    }
    burnc_device_release(dev);
    return 0;
}

Test(device, threads_share_a_device)
{
    burnc_device_t *dev = bt_ref();
    burnc_tensor_t *base = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_F32, 0, NELEM, 1));
    burnc_tensor_t *shared = BT_NOT_NULL(burnc_mul_scalar(base, 1.0)); /* not run yet */
    job jobs[NTHREADS];
    thrd_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (job){.shared = shared, .id = i + 1, .own_handle = i % 2 == 0};
        cr_assert_eq(thrd_create(&th[i], worker, &jobs[i]), thrd_success);
    }
    for (int i = 0; i < NTHREADS; i++)
        thrd_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++)
        cr_assert_eq(jobs[i].failures, 0, "%d failures; last: %s", jobs[i].failures, jobs[i].why);
    float v[NELEM];
    bt_read_f32(shared, v, NELEM);
    for (int i = 0; i < NELEM; i++)
        cr_assert_eq(v[i], (float)i);
    burnc_tensor_release(shared);
    burnc_tensor_release(base);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}
