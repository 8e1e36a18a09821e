/* nn (include/burnc_nn.h): parameter sets, initialisers, layers, losses, optimizers and
 * safetensors files.
 *
 * Expected values come from tests/data/nn/gen_nn.py (numpy, float64 rounded to float32), which
 * writes them as safetensors files: golden.safetensors holds the inputs and outputs of the
 * layers, losses and three optimizer steps; dtypes.safetensors one tensor of every dtype with
 * values this file knows, so reading it checks the reader against numpy's bytes exactly. Layers,
 * optimizers and the digits training run (examples/digits.c) run on ref and on the device under
 * test: BURNC_TEST_DEVICE, else cpu (ref only, saying so, when it is missing); the kernel-count
 * and checkpointing tests are cpu's. Damaged files are made here from the good ones, each with
 * its error. */
#define _GNU_SOURCE /* mkdtemp */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "burnc_nn.h"
#include "common.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char *data_path(const char *name)
{
    const char *dir = getenv("BURNC_TEST_DATA");
    cr_assert(dir, "BURNC_TEST_DATA is not set");
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/nn/%s", dir, name);
    return buf;
}

/* The compiled device under test: BURNC_TEST_DEVICE (the GPU machine sets cuda:0), else cpu. */
static const char *test_spec(void)
{
    const char *spec = getenv("BURNC_TEST_DEVICE");
    return spec && *spec && strcmp(spec, "ref") ? spec : "cpu";
}

/* The devices the layer tests run on: ref always, the device under test where it opens. */
static int open_devices(burnc_device_t *devs[2])
{
    devs[0] = bt_ref();
    devs[1] = burnc_device_open(test_spec());
    if (!devs[1]) {
        printf("nn: %s unavailable (%s): ref only\n", test_spec(), burnc_error_message());
        burnc_error_clear();
        return 1;
    }
    return 2;
}

static burnc_params_t *golden(burnc_device_t *dev)
{
    return BT_NOT_NULL(burnc_safetensors_load(dev, data_path("golden.safetensors")));
}

/* A new reference to the golden tensor `name`. */
static burnc_tensor_t *gold(burnc_params_t *g, const char *name)
{
    int i = burnc_params_find(g, name);
    cr_assert(i >= 0, "golden.safetensors has no \"%s\"", name);
    return BT_NOT_NULL(burnc_params_get(g, i));
}

/* got (any float dtype, read as f32) equals the golden tensor within rtol + atol. */
static void expect_close(burnc_tensor_t *got, burnc_tensor_t *want, double rtol, double atol, const char *what)
{
    cr_assert_not_null(got, "%s: NULL (%s)", what, burnc_error_message());
    int64_t n = burnc_tensor_numel(want);
    cr_assert_eq(burnc_tensor_numel(got), n, "%s: %lld elements, expected %lld", what,
                 (long long)burnc_tensor_numel(got), (long long)n);
    float *a = malloc((size_t)n * sizeof *a + 4), *b = malloc((size_t)n * sizeof *b + 4);
    BT_ASSERT_OK(burnc_tensor_read(got, a, (size_t)n * sizeof *a));
    BT_ASSERT_OK(burnc_tensor_read(want, b, (size_t)n * sizeof *b));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs((double)a[i] - b[i]) <= atol + rtol * fabs((double)b[i]), "%s[%lld]: got %.9g, expected %.9g",
                  what, (long long)i, (double)a[i], (double)b[i]);
    free(a);
    free(b);
}

/* ---- Parameter sets ---------------------------------------------------------------------- */

Test(nn, params_slots_and_errors)
{
    burnc_device_t *dev = bt_ref();
    burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
    burnc_tensor_t *a = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 2, (int64_t[]){2, 3}));
    burnc_tensor_t *b = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 1, (int64_t[]){4}));
    cr_assert_eq(burnc_params_add(p, "a", a), 0);
    cr_assert_eq(burnc_params_add(p, "b", b), 1);
    cr_assert_eq(burnc_params_count(p), 2);
    cr_assert_eq(burnc_params_numel(p), 10);
    cr_assert_eq(burnc_params_find(p, "b"), 1);
    cr_assert_eq(burnc_params_find(p, "c"), -1);
    cr_assert_str_eq(burnc_params_name(p, 0), "a");
    cr_assert_null(burnc_params_name(p, 2));

    burnc_error_clear();
    cr_assert_eq(burnc_params_add(p, "a", b), -1);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INVALID_ARGUMENT, "already has \"a\"");
    cr_assert_eq(burnc_params_add(p, "", b), -1);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INVALID_ARGUMENT, "name of 0 bytes");
    cr_assert_eq(burnc_params_add(p, "x", NULL), -1);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INVALID_ARGUMENT, "NULL tensor");
    BT_ASSERT_FAILS(burnc_params_get(p, 5), BURNC_ERR_INVALID_ARGUMENT, "slot 5 of a set of 2");
    BT_ASSERT_STATUS(burnc_params_set(p, 0, b), BURNC_ERR_SHAPE, "\"a\" has shape [2,3], given [4]");
    burnc_tensor_t *ai = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_I32, 2, (int64_t[]){2, 3}));
    BT_ASSERT_STATUS(burnc_params_set(p, 0, ai), BURNC_ERR_UNSUPPORTED_DTYPE, "\"a\" is f32, given i32");
    burnc_device_t *other = BT_NOT_NULL(burnc_device_open("ref:1"));
    burnc_tensor_t *ao = BT_NOT_NULL(burnc_ones(other, BURNC_DTYPE_F32, 2, (int64_t[]){2, 3}));
    BT_ASSERT_STATUS(burnc_params_set(p, 0, ao), BURNC_ERR_DEVICE_MISMATCH, "\"a\" lives on another device");

    /* a replacement is a new value; the old tensor the caller holds is untouched */
    burnc_tensor_t *a2 = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_F32, 2, (int64_t[]){2, 3}, 7));
    BT_ASSERT_OK(burnc_params_set(p, 0, a2));
    burnc_tensor_t *cur = BT_NOT_NULL(burnc_params_get(p, 0));
    bt_expect_f32(cur, 6, (const float[]){7, 7, 7, 7, 7, 7}, 0);
    bt_expect_f32(a, 6, (const float[]){1, 1, 1, 1, 1, 1}, 0);

    burnc_tensor_t *ts[] = {cur, a2, ao, ai, b, a};
    for (int i = 0; i < COUNT(ts); i++)
        burnc_tensor_release(ts[i]);
    burnc_params_release(p);
    burnc_params_release(NULL);
    burnc_device_release(other);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(nn, params_inside_a_scope_outlive_it)
{
    burnc_device_t *dev = bt_ref();
    burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
    burnc_linear_t l;
    burnc_scope_begin();
    BT_ASSERT_OK(burnc_linear_init(&l, p, dev, "fc", 3, 2, &(burnc_linear_config_t){.init = BURNC_INIT_ZEROS}));
    burnc_tensor_t *t = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_F32, 1, (int64_t[]){2}, 0.5));
    BT_ASSERT_OK(burnc_params_set(p, l.bias, t)); /* the set takes its own reference */
    burnc_scope_end();
    burnc_tensor_t *x = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 2, (int64_t[]){1, 3}));
    burnc_tensor_t *y = BT_NOT_NULL(burnc_linear_forward(&l, x));
    bt_expect_f32(y, 2, (const float[]){0.5f, 0.5f}, 0);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_params_release(p);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(nn, params_assign_converts_and_checks)
{
    burnc_device_t *dev = bt_ref(), *other = BT_NOT_NULL(burnc_device_open("ref:1"));
    burnc_params_t *model = BT_NOT_NULL(burnc_params_new()), *src = BT_NOT_NULL(burnc_params_new());
    burnc_linear_t l;
    BT_ASSERT_OK(burnc_linear_init(&l, model, dev, "fc", 2, 2, NULL));
    /* the source: f64 on another device, with an extra entry */
    burnc_tensor_t *w = BT_NOT_NULL(burnc_tensor_from_data(other, BURNC_DTYPE_F64, 2, (int64_t[]){2, 2},
                                                           (const double[]){1, 2, 3, 4}));
    burnc_tensor_t *bad = BT_NOT_NULL(burnc_zeros(other, BURNC_DTYPE_F64, 1, (int64_t[]){3}));
    burnc_tensor_t *extra = BT_NOT_NULL(burnc_zeros(other, BURNC_DTYPE_F64, 1, (int64_t[]){9}));
    cr_assert_eq(burnc_params_add(src, "fc.weight", w), 0);
    BT_ASSERT_STATUS(burnc_params_assign(model, src), BURNC_ERR_INVALID_ARGUMENT, "the source has no \"fc.bias\"");
    cr_assert_eq(burnc_params_add(src, "fc.bias", bad), 1);
    BT_ASSERT_STATUS(burnc_params_assign(model, src), BURNC_ERR_SHAPE, "\"fc.bias\" is [2] in the model and [3]");
    /* failures left the model as it was: its weight is still the Kaiming draw, not 1 2 3 4 */
    float before[4];
    burnc_tensor_t *w0 = BT_NOT_NULL(burnc_params_get(model, l.weight));
    bt_read_f32(w0, before, 4);
    cr_assert(before[0] != 1.0f || before[1] != 2.0f);

    burnc_params_t *src2 = BT_NOT_NULL(burnc_params_new());
    burnc_tensor_t *b = BT_NOT_NULL(burnc_tensor_from_data(other, BURNC_DTYPE_F64, 1, (int64_t[]){2},
                                                           (const double[]){-1, 0.25}));
    cr_assert_eq(burnc_params_add(src2, "extra", extra), 0);
    cr_assert_eq(burnc_params_add(src2, "fc.bias", b), 1);
    cr_assert_eq(burnc_params_add(src2, "fc.weight", w), 2);
    BT_ASSERT_OK(burnc_params_assign(model, src2));
    burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, (int64_t[]){1, 2},
                                                           (const float[]){1, 10}));
    burnc_tensor_t *y = BT_NOT_NULL(burnc_linear_forward(&l, x));
    bt_expect_f32(y, 2, (const float[]){21 - 1, 43 + 0.25f}, 0);
    burnc_tensor_t *ts[] = {y, x, b, w0, extra, bad, w};
    for (int i = 0; i < COUNT(ts); i++)
        burnc_tensor_release(ts[i]);
    burnc_params_release(src2);
    burnc_params_release(src);
    burnc_params_release(model);
    burnc_device_release(other);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Initialisation ---------------------------------------------------------------------- */

static void read_all(burnc_tensor_t *t, float *out, int64_t n) { bt_read_f32(t, out, n); }

Test(nn, init_bounds_and_seeds)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    enum { N = 4096 };
    static float v[2][N];
    const int64_t shape[2] = {64, 64};
    for (int d = 0; d < nd; d++) {
        BT_ASSERT_OK(burnc_device_seed(devs[d], 7));
        burnc_tensor_t *k = BT_NOT_NULL(burnc_init_kaiming_uniform(devs[d], BURNC_DTYPE_F32, 2, shape, 64, sqrt(2.0)));
        read_all(k, v[d], N);
        double b = sqrt(2.0) * sqrt(3.0 / 64), mean = 0, sq = 0, lo = 0, hi = 0;
        for (int i = 0; i < N; i++) {
            cr_assert(v[d][i] >= -b && v[d][i] < b, "kaiming[%d] = %g outside +-%g", i, (double)v[d][i], b);
            mean += v[d][i] / N;
            sq += (double)v[d][i] * v[d][i] / N;
            lo = fmin(lo, v[d][i]);
            hi = fmax(hi, v[d][i]);
        }
        /* U(-b, b): mean 0, variance b^2 / 3, extremes close to the bounds */
        cr_assert(fabs(mean) < 0.05 * b, "mean %g", mean);
        cr_assert(fabs(sq / (b * b / 3) - 1) < 0.1, "variance %g, expected %g", sq, b * b / 3);
        cr_assert(lo < -0.99 * b && hi > 0.99 * b, "range [%g, %g] for +-%g", lo, hi, b);
        burnc_tensor_release(k);

        burnc_tensor_t *x = BT_NOT_NULL(burnc_init_xavier_uniform(devs[d], BURNC_DTYPE_F32, 2, shape, 64, 32, 1));
        float xv[N];
        read_all(x, xv, N);
        double bx = sqrt(6.0 / 96);
        for (int i = 0; i < N; i++)
            cr_assert(fabsf(xv[i]) <= bx, "xavier[%d] = %g", i, (double)xv[i]);
        burnc_tensor_release(x);

        burnc_tensor_t *nrm = BT_NOT_NULL(burnc_init_normal(devs[d], BURNC_DTYPE_F32, 2, shape, 3, 0.5));
        read_all(nrm, xv, N);
        double m = 0;
        for (int i = 0; i < N; i++)
            m += xv[i] / N;
        cr_assert(fabs(m - 3) < 0.05, "normal mean %g", m);
        burnc_tensor_release(nrm);

        /* the same seed gives the same draw */
        BT_ASSERT_OK(burnc_device_seed(devs[d], 7));
        k = BT_NOT_NULL(burnc_init_kaiming_uniform(devs[d], BURNC_DTYPE_F32, 2, shape, 64, sqrt(2.0)));
        read_all(k, xv, N);
        cr_assert(!memcmp(xv, v[d], sizeof xv), "reseeding did not repeat the draw");
        burnc_tensor_release(k);
        BT_ASSERT_OK(burnc_device_seed(devs[d], 8));
        k = BT_NOT_NULL(burnc_init_kaiming_uniform(devs[d], BURNC_DTYPE_F32, 2, shape, 64, sqrt(2.0)));
        read_all(k, xv, N);
        cr_assert(memcmp(xv, v[d], sizeof xv), "another seed gave the same draw");
        burnc_tensor_release(k);
    }
    if (nd == 2) /* Philox: the same values on every device (within the last rounding of scale + shift) */
        for (int i = 0; i < N; i++)
            cr_assert(fabsf(v[0][i] - v[1][i]) <= 1e-6f, "ref %g cpu %g at %d", (double)v[0][i], (double)v[1][i], i);
    BT_ASSERT_FAILS(burnc_init_kaiming_uniform(devs[0], BURNC_DTYPE_F32, 2, shape, 0, 1), BURNC_ERR_INVALID_ARGUMENT,
                    "fan_in 0");
    BT_ASSERT_FAILS(burnc_init_xavier_uniform(devs[0], BURNC_DTYPE_F32, 2, shape, 3, -1, 1),
                    BURNC_ERR_INVALID_ARGUMENT, "fan_out -1");
    BT_ASSERT_FAILS(burnc_init_uniform(devs[0], BURNC_DTYPE_F32, 2, shape, 1, 0), BURNC_ERR_INVALID_ARGUMENT,
                    "bounds [1, 0)");
    BT_ASSERT_FAILS(burnc_init_uniform(devs[0], BURNC_DTYPE_I32, 2, shape, 0, 1), BURNC_ERR_UNSUPPORTED_DTYPE, "");
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

/* ---- Layers ------------------------------------------------------------------------------ */

Test(nn, linear_matches_numpy)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    for (int d = 0; d < nd; d++) {
        burnc_params_t *g = golden(devs[d]);
        for (int layout = 0; layout < 2; layout++) {
            burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
            burnc_linear_t l;
            BT_ASSERT_OK(burnc_linear_init(&l, p, devs[d], "linear", 5, 3,
                                           &(burnc_linear_config_t){.weight_in_out = layout == 1}));
            cr_assert_eq(burnc_params_count(p), 2);
            cr_assert_str_eq(burnc_params_name(p, l.weight), "linear.weight");
            cr_assert_str_eq(burnc_params_name(p, l.bias), "linear.bias");
            burnc_tensor_t *w = gold(g, "linear.weight"), *b = gold(g, "linear.bias");
            burnc_tensor_t *wl = layout ? BT_NOT_NULL(burnc_transpose(w, 0, 1)) : burnc_tensor_retain(w);
            BT_ASSERT_OK(burnc_params_set(p, l.weight, wl));
            BT_ASSERT_OK(burnc_params_set(p, l.bias, b));
            burnc_tensor_t *x = gold(g, "linear.x"), *want = gold(g, "linear.y");
            burnc_tensor_t *y = burnc_linear_forward(&l, x);
            expect_close(y, want, 1e-6, 1e-6, "linear");
            const int64_t *s = burnc_tensor_shape(y);
            cr_assert(burnc_tensor_rank(y) == 2 && s[0] == 4 && s[1] == 3);

            burnc_tensor_t *x3 = BT_NOT_NULL(burnc_ones(devs[d], BURNC_DTYPE_F32, 2, (int64_t[]){4, 6}));
            BT_ASSERT_FAILS(burnc_linear_forward(&l, x3), BURNC_ERR_SHAPE, "input [4,6] does not end in 5 features");
            burnc_tensor_t *ts[] = {x3, y, want, x, wl, b, w};
            for (int i = 0; i < COUNT(ts); i++)
                burnc_tensor_release(ts[i]);
            burnc_params_release(p);
        }
        /* no bias */
        burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
        burnc_linear_t l;
        BT_ASSERT_OK(burnc_linear_init(&l, p, devs[d], "nb", 5, 3, &(burnc_linear_config_t){.no_bias = true}));
        cr_assert_eq(l.bias, -1);
        cr_assert_eq(burnc_params_count(p), 1);
        BT_ASSERT_STATUS(burnc_linear_init(&l, p, devs[d], "nb", 5, 3, NULL), BURNC_ERR_INVALID_ARGUMENT,
                         "already has \"nb.weight\"");
        BT_ASSERT_STATUS(burnc_linear_init(&l, p, devs[d], "z", 0, 3, NULL), BURNC_ERR_INVALID_ARGUMENT,
                         "\"z\" with 0 inputs");
        cr_assert_eq(burnc_params_count(p), 1, "a failed init left slots behind");
        burnc_params_release(p);
        burnc_params_release(g);
    }
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

Test(nn, layer_norm_and_embedding_match_numpy)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    for (int d = 0; d < nd; d++) {
        burnc_params_t *g = golden(devs[d]), *p = BT_NOT_NULL(burnc_params_new());
        burnc_layer_norm_t ln;
        BT_ASSERT_OK(burnc_layer_norm_init(&ln, p, devs[d], "ln", 6, 0, BURNC_DTYPE_F32));
        cr_assert_eq(ln.eps, 1e-5);
        burnc_tensor_t *w = gold(g, "ln.weight"), *b = gold(g, "ln.bias"), *x = gold(g, "ln.x");
        burnc_tensor_t *want = gold(g, "ln.y");
        /* fresh: weight 1, bias 0 */
        burnc_tensor_t *w0 = BT_NOT_NULL(burnc_params_get(p, ln.weight));
        bt_expect_f32(w0, 6, (const float[]){1, 1, 1, 1, 1, 1}, 0);
        BT_ASSERT_OK(burnc_params_set(p, ln.weight, w));
        BT_ASSERT_OK(burnc_params_set(p, ln.bias, b));
        burnc_tensor_t *y = burnc_layer_norm_forward(&ln, x);
        expect_close(y, want, 1e-5, 1e-5, "layer_norm");

        burnc_embedding_t e;
        BT_ASSERT_OK(burnc_embedding_init(&e, p, devs[d], "emb", 7, 3, BURNC_DTYPE_F32));
        burnc_tensor_t *table = gold(g, "emb.weight"), *idx = gold(g, "emb.idx"), *ey = gold(g, "emb.y");
        BT_ASSERT_OK(burnc_params_set(p, e.weight, table));
        burnc_tensor_t *got = burnc_embedding_forward(&e, idx);
        expect_close(got, ey, 0, 0, "embedding");
        cr_assert_eq(burnc_tensor_rank(got), 3);
        /* an index past the table fails when it runs, and the device stays usable */
        burnc_tensor_t *badi = BT_NOT_NULL(burnc_tensor_from_data(devs[d], BURNC_DTYPE_I64, 1, (int64_t[]){2},
                                                                  (const int64_t[]){1, 7}));
        burnc_tensor_t *bad = BT_NOT_NULL(burnc_embedding_forward(&e, badi));
        float sink[6];
        BT_ASSERT_STATUS(burnc_tensor_read(bad, sink, sizeof sink), BURNC_ERR_INDEX, "");
        burnc_device_sync(devs[d]);
        burnc_error_clear();
        bt_expect_usable(devs[d]);

        burnc_tensor_t *ts[] = {bad, badi, got, ey, idx, table, y, w0, want, x, b, w};
        for (int i = 0; i < COUNT(ts); i++)
            burnc_tensor_release(ts[i]);
        burnc_params_release(p);
        burnc_params_release(g);
    }
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

Test(nn, dropout_mask_from_the_seed)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    enum { N = 8192 };
    static float out[2][N], again[N];
    for (int d = 0; d < nd; d++) {
        burnc_tensor_t *x = BT_NOT_NULL(burnc_full(devs[d], BURNC_DTYPE_F32, 2, (int64_t[]){64, 128}, 3));
        BT_ASSERT_OK(burnc_device_seed(devs[d], 99));
        burnc_tensor_t *y = BT_NOT_NULL(burnc_dropout(x, 0.25, true));
        bt_read_f32(y, out[d], N);
        int zeros = 0;
        for (int i = 0; i < N; i++) {
            cr_assert(out[d][i] == 0 || out[d][i] == 4.0f, "dropout[%d] = %g (0 or 3 / 0.75)", i, (double)out[d][i]);
            zeros += out[d][i] == 0;
        }
        cr_assert(fabs(zeros / (double)N - 0.25) < 0.03, "%d of %d dropped at p = 0.25", zeros, N);
        /* the same seed, the same mask; fused or eager alike */
        BT_ASSERT_OK(burnc_device_seed(devs[d], 99));
        BT_ASSERT_OK(burnc_device_set_fusion(devs[d], false));
        burnc_tensor_t *y2 = BT_NOT_NULL(burnc_dropout(x, 0.25, true));
        bt_read_f32(y2, again, N);
        BT_ASSERT_OK(burnc_device_set_fusion(devs[d], true));
        cr_assert(!memcmp(again, out[d], sizeof again), "the mask changed with the same seed");
        /* eval mode and p = 0 pass x through; p = 1 drops everything */
        burnc_tensor_t *e = BT_NOT_NULL(burnc_dropout(x, 0.25, false));
        burnc_tensor_t *z = BT_NOT_NULL(burnc_dropout(x, 0, true));
        burnc_tensor_t *all = BT_NOT_NULL(burnc_dropout(x, 1, true));
        BT_ASSERT_OK(burnc_tensor_read(e, again, N * sizeof(float)));
        cr_assert(again[0] == 3 && again[N - 1] == 3);
        BT_ASSERT_OK(burnc_tensor_read(z, again, N * sizeof(float)));
        cr_assert(again[17] == 3);
        BT_ASSERT_OK(burnc_tensor_read(all, again, N * sizeof(float)));
        for (int i = 0; i < N; i++)
            cr_assert(again[i] == 0, "p = 1 kept element %d", i);
        BT_ASSERT_FAILS(burnc_dropout(x, 1.5, true), BURNC_ERR_INVALID_ARGUMENT, "probability 1.5");
        BT_ASSERT_FAILS(burnc_dropout(x, NAN, true), BURNC_ERR_INVALID_ARGUMENT, "probability nan");
        burnc_tensor_t *xi = BT_NOT_NULL(burnc_ones(devs[d], BURNC_DTYPE_I32, 1, (int64_t[]){3}));
        BT_ASSERT_FAILS(burnc_dropout(xi, 0.5, true), BURNC_ERR_UNSUPPORTED_DTYPE, "i32 input");
        cr_assert_null(burnc_dropout(NULL, 0.5, true));
        burnc_tensor_t *ts[] = {xi, all, z, e, y2, y, x};
        for (int i = 0; i < COUNT(ts); i++)
            burnc_tensor_release(ts[i]);
    }
    if (nd == 2)
        cr_assert(!memcmp(out[0], out[1], sizeof out[0]), "ref and cpu dropped different elements");
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

Test(nn, activations)
{
    burnc_device_t *dev = bt_ref();
    const float xs[4] = {-2, -0.5f, 0.5f, 3};
    burnc_tensor_t *x = bt_f32(dev, 2, (int64_t[]){2, 2}, xs);
    for (int a = BURNC_ACT_NONE; a <= BURNC_ACT_SOFTMAX; a++) {
        burnc_tensor_t *y = BT_NOT_NULL(burnc_activate(x, (burnc_activation_t)a));
        float got[4], want[4];
        bt_read_f32(y, got, 4);
        for (int i = 0; i < 4; i++) {
            double v = xs[i], s = 1 / (1 + exp(-v));
            double row = exp(xs[i & 2]) + exp(xs[(i & 2) + 1]);
            double r[] = {v, fmax(v, 0), 0.5 * v * (1 + erf(v / sqrt(2))), v * s, tanh(v), s, exp(v) / row};
            want[i] = (float)r[a];
        }
        for (int i = 0; i < 4; i++)
            cr_assert(fabsf(got[i] - want[i]) <= 1e-6f * fmaxf(1, fabsf(want[i])), "activation %d [%d]: %g vs %g", a,
                      i, (double)got[i], (double)want[i]);
        burnc_tensor_release(y);
    }
    BT_ASSERT_FAILS(burnc_activate(x, (burnc_activation_t)42), BURNC_ERR_INVALID_ARGUMENT, "activation 42");
    cr_assert_null(burnc_activate(NULL, BURNC_ACT_RELU));
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Losses ------------------------------------------------------------------------------ */

Test(nn, losses_match_numpy)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    for (int d = 0; d < nd; d++) {
        burnc_params_t *g = golden(devs[d]);
        burnc_tensor_t *logits = gold(g, "ce.logits"), *labels = gold(g, "ce.labels"), *want = gold(g, "ce.loss");
        burnc_tensor_t *loss = burnc_cross_entropy(logits, labels);
        cr_assert_eq(burnc_tensor_rank(loss), 0);
        expect_close(loss, want, 1e-6, 0, "cross_entropy");
        burnc_tensor_t *l32 = BT_NOT_NULL(burnc_cast(labels, BURNC_DTYPE_I32));
        burnc_tensor_t *loss32 = burnc_cross_entropy(logits, l32);
        expect_close(loss32, want, 1e-6, 0, "cross_entropy (i32 labels)");
        burnc_tensor_t *pred = gold(g, "mse.pred"), *target = gold(g, "mse.target"), *mwant = gold(g, "mse.loss");
        burnc_tensor_t *mse = burnc_mse_loss(pred, target);
        expect_close(mse, mwant, 1e-6, 0, "mse");

        burnc_tensor_t *lf = BT_NOT_NULL(burnc_cast(labels, BURNC_DTYPE_F32));
        BT_ASSERT_FAILS(burnc_cross_entropy(logits, lf), BURNC_ERR_UNSUPPORTED_DTYPE, "labels of f32");
        BT_ASSERT_FAILS(burnc_cross_entropy(logits, pred), BURNC_ERR_SHAPE, "logits [5,4] and labels [3,4]");
        cr_assert_null(burnc_cross_entropy(NULL, labels));
        /* a label out of range fails when it runs */
        burnc_tensor_t *bl = BT_NOT_NULL(burnc_tensor_from_data(devs[d], BURNC_DTYPE_I64, 1, (int64_t[]){5},
                                                                (const int64_t[]){0, 1, 2, 3, 4}));
        burnc_tensor_t *bad = BT_NOT_NULL(burnc_cross_entropy(logits, bl));
        float v;
        BT_ASSERT_STATUS(burnc_tensor_read(bad, &v, sizeof v), BURNC_ERR_INDEX, "");
        burnc_device_sync(devs[d]);
        burnc_error_clear();
        bt_expect_usable(devs[d]);
        burnc_tensor_t *ts[] = {bad, bl, lf, mse, mwant, target, pred, loss32, l32, loss, want, labels, logits};
        for (int i = 0; i < COUNT(ts); i++)
            burnc_tensor_release(ts[i]);
        burnc_params_release(g);
    }
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

/* ---- Optimizers -------------------------------------------------------------------------- */

/* Three steps from golden's p0 with its gradients; the result against `want`. */
static void three_steps(burnc_device_t *dev, burnc_params_t *g, burnc_optim_t *o, const char *want_name)
{
    burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
    burnc_tensor_t *p0 = gold(g, "opt.p0"), *grads = gold(g, "opt.grads");
    cr_assert_eq(burnc_params_add(p, "w", p0), 0);
    /* a second slot without gradients stays as it is */
    burnc_tensor_t *still = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_F32, 1, (int64_t[]){2}, 5));
    cr_assert_eq(burnc_params_add(p, "still", still), 1);
    for (int t = 0; t < 3; t++) {
        burnc_tensor_t *row = BT_NOT_NULL(burnc_slice(grads, 0, t, t + 1, 1));
        burnc_tensor_t *gt = BT_NOT_NULL(burnc_reshape(row, 1, (int64_t[]){10}));
        burnc_tensor_t *list[2] = {gt, NULL};
        BT_ASSERT_OK(burnc_optim_step_tensors(o, p, list));
        burnc_tensor_release(gt);
        burnc_tensor_release(row);
    }
    cr_assert_eq(burnc_optim_steps(o), 3);
    burnc_tensor_t *got = BT_NOT_NULL(burnc_params_get(p, 0)), *want = gold(g, want_name);
    expect_close(got, want, 2e-6, 2e-7, want_name);
    burnc_tensor_t *s = BT_NOT_NULL(burnc_params_get(p, 1));
    bt_expect_f32(s, 2, (const float[]){5, 5}, 0);
    /* the optimizer keeps the p0 the caller holds unchanged (values, not buffers, are updated) */
    burnc_tensor_t *p0again = gold(g, "opt.p0");
    expect_close(p0, p0again, 0, 0, "p0 unchanged");
    burnc_tensor_t *ts[] = {p0again, s, want, got, still, grads, p0};
    for (int i = 0; i < COUNT(ts); i++)
        burnc_tensor_release(ts[i]);
    burnc_params_release(p);
}

Test(nn, optimizers_match_torch_formulas)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    for (int d = 0; d < nd; d++) {
        burnc_params_t *g = golden(devs[d]);
        struct {
            burnc_optim_t *o;
            const char *want;
        } cases[] = {
            {burnc_optim_sgd(0.1, 0, 0, false), "sgd.p3"},
            {burnc_optim_sgd(0.1, 0.9, 0.01, false), "sgd_momentum.p3"},
            {burnc_optim_sgd(0.05, 0.8, 0, true), "sgd_nesterov.p3"},
            {burnc_optim_adam(0.01, 0.9, 0.999, 1e-8, 0.01), "adam.p3"},
            {burnc_optim_adamw(0.01, 0.9, 0.99, 1e-6, 0.1), "adamw.p3"},
        };
        for (int c = 0; c < COUNT(cases); c++) {
            cr_assert_not_null(cases[c].o, "%s: %s", cases[c].want, burnc_error_message());
            three_steps(devs[d], g, cases[c].o, cases[c].want);
            burnc_optim_release(cases[c].o);
        }
        burnc_params_release(g);
    }
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

Test(nn, optimizer_errors)
{
    burnc_device_t *dev = bt_ref();
    BT_ASSERT_FAILS(burnc_optim_sgd(-1, 0, 0, false), BURNC_ERR_INVALID_ARGUMENT, "burnc_optim_sgd: lr -1");
    BT_ASSERT_FAILS(burnc_optim_sgd(0.1, 0, 0, true), BURNC_ERR_INVALID_ARGUMENT, "nesterov 1");
    BT_ASSERT_FAILS(burnc_optim_adam(0.1, 1, 0.999, 1e-8, 0), BURNC_ERR_INVALID_ARGUMENT, "betas (1, 0.999)");
    BT_ASSERT_FAILS(burnc_optim_adamw(NAN, 0.9, 0.999, 1e-8, 0), BURNC_ERR_INVALID_ARGUMENT, "lr nan");
    burnc_optim_t *o = BT_NOT_NULL(burnc_optim_adam(0.1, 0.9, 0.999, 1e-8, 0));
    BT_ASSERT_STATUS(burnc_optim_set_lr(o, -2), BURNC_ERR_INVALID_ARGUMENT, "lr -2");
    BT_ASSERT_OK(burnc_optim_set_lr(o, 0.5));

    burnc_params_t *p = BT_NOT_NULL(burnc_params_new()), *q = BT_NOT_NULL(burnc_params_new());
    burnc_tensor_t *w = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, (int64_t[]){3}));
    burnc_tensor_t *g4 = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F32, 1, (int64_t[]){4}));
    burnc_tensor_t *g64 = BT_NOT_NULL(burnc_ones(dev, BURNC_DTYPE_F64, 1, (int64_t[]){3}));
    burnc_tensor_t *g = BT_NOT_NULL(burnc_full(dev, BURNC_DTYPE_F32, 1, (int64_t[]){3}, 2));
    cr_assert_eq(burnc_params_add(p, "w", w), 0);
    cr_assert_eq(burnc_params_add(q, "w", w), 0);
    BT_ASSERT_STATUS(burnc_optim_step_tensors(o, p, (burnc_tensor_t *[]){g4}), BURNC_ERR_SHAPE,
                     "gradient [4] for \"w\" of shape [3]");
    BT_ASSERT_STATUS(burnc_optim_step_tensors(o, p, (burnc_tensor_t *[]){g64}), BURNC_ERR_UNSUPPORTED_DTYPE,
                     "f64 gradient for \"w\" of f32");
    cr_assert_eq(burnc_optim_steps(o), 0);
    burnc_tensor_t *cur = BT_NOT_NULL(burnc_params_get(p, 0));
    bt_expect_f32(cur, 3, (const float[]){1, 1, 1}, 0); /* a refused step changed nothing */
    burnc_tensor_release(cur);
    BT_ASSERT_OK(burnc_optim_step_tensors(o, p, (burnc_tensor_t *[]){g}));
    /* Adam's first step moves every element by lr (m / sqrt(v) = sign g) */
    cur = BT_NOT_NULL(burnc_params_get(p, 0));
    bt_expect_f32(cur, 3, (const float[]){0.5f, 0.5f, 0.5f}, 1e-6f);
    BT_ASSERT_STATUS(burnc_optim_step_tensors(o, q, (burnc_tensor_t *[]){g}), BURNC_ERR_INVALID_ARGUMENT,
                     "state for another set");
    BT_ASSERT_STATUS(burnc_optim_step_tensors(NULL, q, (burnc_tensor_t *[]){g}), BURNC_ERR_INVALID_ARGUMENT,
                     "NULL optimizer");
    burnc_tensor_t *ts[] = {cur, g, g64, g4, w};
    for (int i = 0; i < COUNT(ts); i++)
        burnc_tensor_release(ts[i]);
    burnc_params_release(q);
    burnc_params_release(p);
    burnc_optim_release(o);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* The fusion log's groups, counted. */
typedef struct {
    int groups, outputs;
} group_count;

static void count_groups(void *user, const char *topic, const char *msg)
{
    group_count *c = user;
    if (!strcmp(topic, "fusion") && strstr(msg, " group ")) {
        c->groups++;
        const char *o = strstr(msg, " output");
        if (o) {
            const char *q = o;
            while (q > msg && q[-1] >= '0' && q[-1] <= '9')
                q--;
            c->outputs += atoi(q);
        }
    }
}

Test(nn, optimizer_update_is_one_kernel_per_parameter)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    if (!dev)
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    const int64_t shapes[3][2] = {{64, 32}, {32, 1}, {1000, 3}};
    for (int kind = 0; kind < 3; kind++) {
        burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
        burnc_tensor_t *grads[3];
        for (int i = 0; i < 3; i++) {
            char name[8] = {'p', (char)('0' + i), 0};
            burnc_tensor_t *w = BT_NOT_NULL(burnc_randn(dev, BURNC_DTYPE_F32, 2, shapes[i]));
            grads[i] = BT_NOT_NULL(burnc_randn(dev, BURNC_DTYPE_F32, 2, shapes[i]));
            cr_assert_eq(burnc_params_add(p, name, w), i);
            burnc_tensor_release(w);
        }
        BT_ASSERT_OK(burnc_device_sync(dev));
        burnc_optim_t *o = kind == 0 ? burnc_optim_sgd(0.1, 0.9, 1e-4, false)
                         : kind == 1 ? burnc_optim_adam(1e-3, 0.9, 0.999, 1e-8, 1e-4)
                                     : burnc_optim_adamw(1e-3, 0.9, 0.999, 1e-8, 1e-2);
        cr_assert_not_null(o);
        for (int step = 0; step < 3; step++) {
            group_count c = {0};
            burnc_log_set_callback(count_groups, &c);
            BT_ASSERT_OK(burnc_optim_step_tensors(o, p, grads));
            BT_ASSERT_OK(burnc_device_sync(dev));
            burnc_log_set_callback(NULL, NULL);
            /* SGD with momentum writes param and buffer, Adam param, m and v: all from one kernel */
            int outs = kind == 0 ? 2 : 3;
            cr_assert_eq(c.groups, 3, "optimizer %d step %d ran %d kernels for 3 parameters", kind, step, c.groups);
            cr_assert_eq(c.outputs, 3 * outs, "optimizer %d step %d wrote %d outputs", kind, step, c.outputs);
        }
        for (int i = 0; i < 3; i++)
            burnc_tensor_release(grads[i]);
        burnc_optim_release(o);
        burnc_params_release(p);
    }
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- safetensors ------------------------------------------------------------------------- */

static void expect_bytes(burnc_params_t *p, const char *name, burnc_dtype_t dt, int rank, const int64_t *shape,
                         const void *want, size_t bytes)
{
    int i = burnc_params_find(p, name);
    cr_assert(i >= 0, "no \"%s\"", name);
    burnc_tensor_t *t = BT_NOT_NULL(burnc_params_get(p, i));
    cr_assert_eq(burnc_tensor_dtype(t), dt, "%s: dtype %s", name, burnc_dtype_name(burnc_tensor_dtype(t)));
    cr_assert_eq(burnc_tensor_rank(t), rank, "%s: rank %d", name, burnc_tensor_rank(t));
    for (int d = 0; d < rank; d++)
        cr_assert_eq(burnc_tensor_shape(t)[d], shape[d], "%s: axis %d", name, d);
    unsigned char got[64];
    cr_assert(bytes <= sizeof got);
    BT_ASSERT_OK(burnc_tensor_read(t, got, sizeof got));
    cr_assert(!memcmp(got, want, bytes), "%s: bytes differ from numpy's", name);
    burnc_tensor_release(t);
}

static void expect_numpy_dtypes(burnc_params_t *p)
{
    cr_assert_eq(burnc_params_count(p), 11);
    expect_bytes(p, "f32", BURNC_DTYPE_F32, 2, (int64_t[]){2, 3}, (const float[]){1.5f, -2.25f, 3, 0.1f, 1e-30f, -7e5f},
                 24);
    expect_bytes(p, "f64", BURNC_DTYPE_F64, 1, (int64_t[]){3}, (const double[]){M_PI, -1e300, 5e-324}, 24);
    uint16_t f16[4] = {burnc_f32_to_f16(1), burnc_f32_to_f16(-0.5f), burnc_f32_to_f16(65504), burnc_f32_to_f16(6e-8f)};
    expect_bytes(p, "f16", BURNC_DTYPE_F16, 1, (int64_t[]){4}, f16, 8);
    uint16_t bf16[4] = {burnc_f32_to_bf16(1), burnc_f32_to_bf16(-3.140625f), burnc_f32_to_bf16(1e38f),
                        burnc_f32_to_bf16(0x1p-130f)};
    expect_bytes(p, "bf16", BURNC_DTYPE_BF16, 2, (int64_t[]){2, 2}, bf16, 8);
    expect_bytes(p, "i32", BURNC_DTYPE_I32, 1, (int64_t[]){3}, (const int32_t[]){INT32_MIN, 0, INT32_MAX}, 12);
    expect_bytes(p, "i64", BURNC_DTYPE_I64, 1, (int64_t[]){2},
                 (const int64_t[]){-(INT64_C(1) << 62) - 5, (INT64_C(1) << 62) + 7}, 16);
    expect_bytes(p, "u8", BURNC_DTYPE_U8, 1, (int64_t[]){5}, (const uint8_t[]){0, 1, 127, 128, 255}, 5);
    expect_bytes(p, "bool", BURNC_DTYPE_BOOL, 1, (int64_t[]){4}, (const uint8_t[]){1, 0, 0, 1}, 4);
    expect_bytes(p, "scalar", BURNC_DTYPE_F32, 0, NULL, (const float[]){42.5f}, 4);
    expect_bytes(p, "empty", BURNC_DTYPE_F32, 2, (int64_t[]){0, 3}, "", 0);
    expect_bytes(p, "layer.0/\xc3\xbcn\xc3\xaf" "c\xc3\xb8" "de \"q\"", BURNC_DTYPE_F32, 1, (int64_t[]){1},
                 (const float[]){-1}, 4);
}

Test(nn, safetensors_reads_numpy_exactly)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    for (int d = 0; d < nd; d++) {
        burnc_params_t *p = BT_NOT_NULL(burnc_safetensors_load(devs[d], data_path("dtypes.safetensors")));
        expect_numpy_dtypes(p);
        /* slots come in the order of the data in the file (numpy wrote u8 first) */
        cr_assert_str_eq(burnc_params_name(p, 0), "u8");
        cr_assert_str_eq(burnc_params_name(p, 1), "f32");
        burnc_params_release(p);
    }
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

Test(nn, safetensors_round_trip)
{
    burnc_device_t *dev = bt_ref();
    char dir[] = "/tmp/burnc-nn-XXXXXX";
    cr_assert(mkdtemp(dir));
    char a[64], b[64];
    snprintf(a, sizeof a, "%s/a.safetensors", dir);
    snprintf(b, sizeof b, "%s/b.safetensors", dir);

    burnc_params_t *p = BT_NOT_NULL(burnc_safetensors_load(dev, data_path("dtypes.safetensors")));
    BT_ASSERT_OK(burnc_safetensors_save(p, a));
    burnc_params_t *q = BT_NOT_NULL(burnc_safetensors_load(dev, a));
    expect_numpy_dtypes(q);
    for (int i = 0; i < burnc_params_count(p); i++)
        cr_assert_str_eq(burnc_params_name(q, i), burnc_params_name(p, i), "slot order changed");
    /* saving what was loaded writes the same bytes; the header is padded to 8 */
    BT_ASSERT_OK(burnc_safetensors_save(q, b));
    size_t na, nb;
    unsigned char *fa = slurp(a, &na), *fb = slurp(b, &nb);
    cr_assert(na == nb && !memcmp(fa, fb, na), "a saved file changed on a second round trip");
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)fa[i] << (8 * i);
    cr_assert_eq((8 + hlen) % 8, 0);
    cr_assert_eq(fa[8], '{');
    cr_assert(memmem(fa + 8, hlen, "\"f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[5,29]}", 57),
              "header: %.*s", (int)hlen, fa + 8);

    /* a computed, lazy tensor is run and written */
    burnc_params_t *c = BT_NOT_NULL(burnc_params_new());
    burnc_tensor_t *ar = BT_NOT_NULL(burnc_arange(dev, BURNC_DTYPE_F64, 0, 6, 1));
    burnc_tensor_t *sq = BT_NOT_NULL(burnc_mul(ar, ar));
    cr_assert_eq(burnc_params_add(c, "sq", sq), 0);
    BT_ASSERT_OK(burnc_safetensors_save(c, b));
    burnc_params_t *cq = BT_NOT_NULL(burnc_safetensors_load(dev, b));
    expect_bytes(cq, "sq", BURNC_DTYPE_F64, 1, (int64_t[]){6}, (const double[]){0, 1, 4, 9, 16, 25}, 48);
    /* an empty set is a valid file */
    burnc_params_t *none = BT_NOT_NULL(burnc_params_new());
    BT_ASSERT_OK(burnc_safetensors_save(none, b));
    burnc_params_t *none2 = BT_NOT_NULL(burnc_safetensors_load(dev, b));
    cr_assert_eq(burnc_params_count(none2), 0);
    /* an unwritable path fails and says why */
    char bad[80];
    snprintf(bad, sizeof bad, "%s/missing/x.safetensors", dir);
    BT_ASSERT_STATUS(burnc_safetensors_save(p, bad), BURNC_ERR_EXECUTION, "cannot open");

    free(fa);
    free(fb);
    remove(a);
    remove(b);
    rmdir(dir);
    burnc_tensor_release(sq);
    burnc_tensor_release(ar);
    burnc_params_t *sets[] = {none2, none, cq, c, q, p};
    for (int i = 0; i < COUNT(sets); i++)
        burnc_params_release(sets[i]);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* A copy of the numpy file with its header replaced (length rewritten, data kept). */
static void with_header(const char *out, const unsigned char *file, const char *header)
{
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)file[i] << (8 * i);
    FILE *f = fopen(out, "wb");
    uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    fwrite(file + 8 + hlen, 1, 8, f); /* 8 data bytes: room for the two tensors below */
    fclose(f);
}

Test(nn, safetensors_damaged_files)
{
    burnc_device_t *dev = bt_ref();
    char dir[] = "/tmp/burnc-nn-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    size_t n;
    unsigned char *good = slurp(data_path("dtypes.safetensors"), &n);

    struct {
        const char *header; /* NULL: the case writes its own bytes */
        burnc_status_t code;
        const char *msg;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", BURNC_OK, ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", BURNC_ERR_INVALID_ARGUMENT,
         "overlap or leave a hole"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", BURNC_ERR_INVALID_ARGUMENT,
         "\"a\" starts at 4, not at 0"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", BURNC_ERR_INVALID_ARGUMENT,
         "cover 4 bytes of the 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", BURNC_ERR_INVALID_ARGUMENT,
         "\"a\" has offsets [0, 8) for 12 bytes"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", BURNC_ERR_INVALID_ARGUMENT,
         "\"a\" appears twice"},
        {"{\"a\":{\"dtype\":\"I16\",\"shape\":[4],\"data_offsets\":[0,8]}}", BURNC_ERR_UNSUPPORTED_DTYPE,
         "\"a\" has dtype I16"},
        {"{\"a\":{\"dtype\":\"BOOL\",\"shape\":[8],\"data_offsets\":[0,8]}}", BURNC_ERR_INVALID_ARGUMENT,
         "BOOL tensor \"a\" holds the byte"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", BURNC_ERR_INVALID_ARGUMENT,
         "not a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", BURNC_ERR_INVALID_ARGUMENT,
         "not an integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", BURNC_ERR_INVALID_ARGUMENT, "lacks dtype, shape or data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", BURNC_ERR_INVALID_ARGUMENT,
         "does not close"},
        {"[1,2]", BURNC_ERR_INVALID_ARGUMENT, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", BURNC_ERR_INVALID_ARGUMENT,
         "bytes after the header"},
        {"{\"a\\q\":{}}", BURNC_ERR_INVALID_ARGUMENT, "bad escape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}",
         BURNC_ERR_INVALID_ARGUMENT, "more than 8 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,8]}}",
         BURNC_ERR_INVALID_ARGUMENT, "more than 2^64 bytes"},
        {"{\"__metadata__\":{\"k\":[1,{\"x\":null}]},\"a\":{\"data_offsets\":[0,8],\"extra\":true,\"shape\":[2,1],"
         "\"dtype\":\"I32\"}}", BURNC_OK, ""},
    };
    for (int c = 0; c < COUNT(cases); c++) {
        with_header(path, good, cases[c].header);
        burnc_error_clear();
        burnc_params_t *p = burnc_safetensors_load(dev, path);
        if (cases[c].code == BURNC_OK) {
            cr_assert_not_null(p, "case %d: %s", c, burnc_error_message());
            cr_assert_eq(burnc_params_count(p), 1);
        } else {
            cr_assert_null(p, "case %d loaded", c);
            BT_ASSERT_LAST_ERROR(cases[c].code, cases[c].msg);
            BT_ASSERT_MSG_HAS("bad.safetensors");
        }
        burnc_params_release(p);
    }
    /* truncated anywhere: never a crash, always an error */
    for (size_t cut = 0; cut < n; cut += cut < 16 ? 1 : 37) {
        spit(path, good, cut);
        burnc_error_clear();
        cr_assert_null(burnc_safetensors_load(dev, path), "a file cut at %zu bytes loaded", cut);
        cr_assert_eq(burnc_error_code(), BURNC_ERR_INVALID_ARGUMENT, "cut at %zu: %s", cut, burnc_error_message());
    }
    spit(path, good, 7);
    BT_ASSERT_FAILS(burnc_safetensors_load(dev, path), BURNC_ERR_INVALID_ARGUMENT, "shorter than the 8-byte");
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    spit(path, huge, sizeof huge);
    BT_ASSERT_FAILS(burnc_safetensors_load(dev, path), BURNC_ERR_INVALID_ARGUMENT, "a header of");
    /* a flipped byte anywhere in the header: an error or a file that still parses, never a crash */
    for (size_t i = 8; i < 8 + 200 && i < n; i++) {
        unsigned char *m = malloc(n);
        memcpy(m, good, n);
        m[i] ^= 0x5a;
        spit(path, m, n);
        free(m);
        burnc_params_t *p = burnc_safetensors_load(dev, path);
        burnc_params_release(p);
    }
    remove(path);
    BT_ASSERT_FAILS(burnc_safetensors_load(dev, path), BURNC_ERR_EXECUTION, "cannot open");
    BT_ASSERT_FAILS(burnc_safetensors_load(NULL, path), BURNC_ERR_INVALID_ARGUMENT, "NULL device");
    rmdir(dir);
    free(good);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- With autodiff ----------------------------------------------------------------------- */

/* Linear + cross-entropy on an autodiff device: the parameters are leaves, their gradients
 * match the closed form (softmax - onehot) / N, and an optimizer step from the backward pass
 * equals one from those gradients as tensors; the new parameters are leaves again, so training
 * goes on. */
Test(nn, linear_cross_entropy_gradients_and_steps)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    const float xs[4][5] = {{0.5f, -1, 2, 0.25f, 1}, {1.5f, -0.75f, 0, 1, -2}, {0, 0.5f, -0.5f, 3, 1},
                            {-1, 2, 1, -1, 0.5f}};
    const int64_t labels[4] = {0, 2, 1, 2};
    for (int d = 0; d < nd; d++) {
        burnc_device_t *ad = BT_NOT_NULL(burnc_device_autodiff(devs[d]));
        BT_ASSERT_OK(burnc_device_seed(ad, 11));
        burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
        burnc_linear_t l;
        BT_ASSERT_OK(burnc_linear_init(&l, p, ad, "fc", 5, 3, NULL));
        burnc_tensor_t *w = BT_NOT_NULL(burnc_params_get(p, l.weight)), *b = BT_NOT_NULL(burnc_params_get(p, l.bias));
        cr_assert(burnc_tensor_requires_grad(w) && burnc_tensor_requires_grad(b), "parameters are not leaves");
        float wv[15], bv[3];
        bt_read_f32(w, wv, 15);
        bt_read_f32(b, bv, 3);
        double dw[15] = {0}, db[3] = {0};
        for (int i = 0; i < 4; i++) { /* the closed form, in double */
            double z[3], mx = -INFINITY, sum = 0;
            for (int j = 0; j < 3; j++) {
                z[j] = bv[j];
                for (int k = 0; k < 5; k++)
                    z[j] += (double)wv[j * 5 + k] * xs[i][k];
                mx = fmax(mx, z[j]);
            }
            for (int j = 0; j < 3; j++)
                sum += exp(z[j] - mx);
            for (int j = 0; j < 3; j++) {
                double dz = (exp(z[j] - mx) / sum - (j == labels[i])) / 4;
                db[j] += dz;
                for (int k = 0; k < 5; k++)
                    dw[j * 5 + k] += dz * xs[i][k];
            }
        }
        burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(ad, BURNC_DTYPE_F32, 2, (int64_t[]){4, 5}, xs));
        burnc_tensor_t *y = BT_NOT_NULL(burnc_tensor_from_data(ad, BURNC_DTYPE_I64, 1, (int64_t[]){4}, labels));
        burnc_scope_begin();
        burnc_tensor_t *loss = BT_NOT_NULL(burnc_cross_entropy(burnc_linear_forward(&l, x), y));
        burnc_grads_t *g = burnc_backward(loss);
        cr_assert_not_null(g, "%s", burnc_error_message());
        burnc_tensor_t *gw = BT_NOT_NULL(burnc_grad(g, w)), *gb = BT_NOT_NULL(burnc_grad(g, b));
        float got[15];
        bt_read_f32(gw, got, 15);
        for (int k = 0; k < 15; k++)
            cr_assert(fabs(got[k] - dw[k]) <= 1e-6 + 1e-5 * fabs(dw[k]), "dW[%d] %g vs %g", k, (double)got[k], dw[k]);
        bt_read_f32(gb, got, 3);
        for (int k = 0; k < 3; k++)
            cr_assert(fabs(got[k] - db[k]) <= 1e-6 + 1e-5 * fabs(db[k]), "db[%d] %g vs %g", k, (double)got[k], db[k]);

        /* a step from the backward pass equals a step from the same gradients as tensors */
        burnc_params_t *twin = BT_NOT_NULL(burnc_params_new());
        cr_assert_eq(burnc_params_add(twin, "fc.weight", w), 0);
        cr_assert_eq(burnc_params_add(twin, "fc.bias", b), 1);
        burnc_optim_t *o1 = BT_NOT_NULL(burnc_optim_sgd(0.5, 0.9, 0, false));
        burnc_optim_t *o2 = BT_NOT_NULL(burnc_optim_sgd(0.5, 0.9, 0, false));
        BT_ASSERT_OK(burnc_optim_step(o1, p, g));
        BT_ASSERT_OK(burnc_optim_step_tensors(o2, twin, (burnc_tensor_t *[]){gw, gb}));
        burnc_grads_release(g);
        burnc_scope_end();
        for (int s = 0; s < 2; s++) {
            burnc_tensor_t *a = BT_NOT_NULL(burnc_params_get(p, s)), *c = BT_NOT_NULL(burnc_params_get(twin, s));
            cr_assert(burnc_tensor_requires_grad(a), "slot %d is no longer a leaf after the step", s);
            expect_close(a, c, 0, 0, "step from grads vs step from tensors");
            float v[15];
            BT_ASSERT_OK(burnc_tensor_read(a, v, sizeof v));
            cr_assert(v[0] != (s ? bv[0] : wv[0]), "the step changed nothing");
            burnc_tensor_release(c);
            burnc_tensor_release(a);
        }
        /* training goes on: the loss falls over a few more steps */
        float first = 0, last = 0;
        for (int it = 0; it < 20; it++) {
            burnc_scope_begin();
            burnc_tensor_t *l2 = BT_NOT_NULL(burnc_cross_entropy(burnc_linear_forward(&l, x), y));
            burnc_grads_t *g2 = burnc_backward(l2);
            cr_assert_not_null(g2, "step %d: %s", it, burnc_error_message());
            BT_ASSERT_OK(burnc_optim_step(o1, p, g2));
            BT_ASSERT_OK(burnc_tensor_read(l2, it ? &last : &first, sizeof first));
            burnc_grads_release(g2);
            burnc_scope_end();
        }
        cr_assert(last < 0.5f * first, "loss %g -> %g over 20 steps", (double)first, (double)last);
        /* a step given a NULL gradients object fails cleanly */
        BT_ASSERT_STATUS(burnc_optim_step(o1, p, NULL), BURNC_ERR_INVALID_ARGUMENT, "NULL gradients");

        burnc_optim_release(o1);
        burnc_optim_release(o2);
        burnc_params_release(twin);
        burnc_tensor_t *ts[] = {y, x, b, w}; /* gw and gb belonged to the scope */
        for (int i = 0; i < COUNT(ts); i++)
            burnc_tensor_release(ts[i]);
        burnc_params_release(p);
        burnc_device_release(ad);
    }
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}

/* Gradients through dropout (the kept elements, scaled), embedding (rows hit, counted), layer
 * norm's affine parameters and MSE, on ref. */
Test(nn, layer_gradients)
{
    burnc_device_t *plain = bt_ref(), *ad = BT_NOT_NULL(burnc_device_autodiff(plain));
    burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
    burnc_embedding_t e;
    burnc_layer_norm_t ln;
    BT_ASSERT_OK(burnc_embedding_init(&e, p, ad, "emb", 5, 4, BURNC_DTYPE_F32));
    BT_ASSERT_OK(burnc_layer_norm_init(&ln, p, ad, "ln", 4, 1e-5, BURNC_DTYPE_F32));
    burnc_tensor_t *idx = BT_NOT_NULL(burnc_tensor_from_data(ad, BURNC_DTYPE_I64, 2, (int64_t[]){2, 3},
                                                             (const int64_t[]){1, 3, 1, 4, 1, 0}));
    burnc_tensor_t *target = BT_NOT_NULL(burnc_zeros(ad, BURNC_DTYPE_F32, 3, (int64_t[]){2, 3, 4}));
    BT_ASSERT_OK(burnc_device_seed(ad, 4));
    burnc_scope_begin();
    burnc_tensor_t *emb = BT_NOT_NULL(burnc_embedding_forward(&e, idx));
    burnc_tensor_t *dropped = BT_NOT_NULL(burnc_dropout(emb, 0.5, true));
    burnc_tensor_t *normed = BT_NOT_NULL(burnc_layer_norm_forward(&ln, emb));
    /* loss = sum(dropout(emb)) + mse(ln(emb), 0) */
    burnc_tensor_t *loss = BT_NOT_NULL(burnc_add(burnc_sum(dropped, 0, NULL, false), burnc_mse_loss(normed, target)));
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    /* the layer-norm bias's gradient is d mse / d out summed over rows: 2 * ln / 24 */
    float nv[24], gbias[4], drop[24];
    bt_read_f32(normed, nv, 24);
    bt_read_f32(dropped, drop, 24);
    burnc_tensor_t *bias = BT_NOT_NULL(burnc_params_get(p, ln.bias));
    burnc_tensor_t *gbt = BT_NOT_NULL(burnc_grad(g, bias));
    bt_read_f32(gbt, gbias, 4);
    burnc_tensor_release(gbt);
    for (int k = 0; k < 4; k++) {
        double want = 0;
        for (int r = 0; r < 6; r++)
            want += 2.0 * nv[r * 4 + k] / 24;
        cr_assert(fabs(gbias[k] - want) <= 1e-6, "d bias[%d] %g vs %g", k, (double)gbias[k], want);
    }
    /* the table's gradient: dropout's part is its mask * 2 summed into each row picked */
    burnc_tensor_t *table = BT_NOT_NULL(burnc_params_get(p, e.weight));
    burnc_tensor_t *gt = BT_NOT_NULL(burnc_grad(g, table));
    float gtv[20];
    bt_read_f32(gt, gtv, 20);
    float tv[20];
    bt_read_f32(table, tv, 20);
    const int rows[6] = {1, 3, 1, 4, 1, 0};
    /* rows never picked (2) get nothing */
    for (int k = 0; k < 4; k++)
        cr_assert_eq(gtv[2 * 4 + k], 0.0f, "row 2 got %g", (double)gtv[2 * 4 + k]);
    /* the dropout part alone, from the mask: subtract the layer-norm part computed by a second pass */
    burnc_grads_release(g);
    burnc_scope_end();
    burnc_scope_begin();
    burnc_tensor_t *emb2 = BT_NOT_NULL(burnc_embedding_forward(&e, idx));
    burnc_tensor_t *l2 = BT_NOT_NULL(burnc_mse_loss(burnc_layer_norm_forward(&ln, emb2), target));
    burnc_grads_t *g2 = burnc_backward(l2);
    cr_assert_not_null(g2, "%s", burnc_error_message());
    float lnpart[20];
    burnc_tensor_t *glt = BT_NOT_NULL(burnc_grad(g2, table));
    bt_read_f32(glt, lnpart, 20);
    burnc_tensor_release(glt);
    double want[20] = {0};
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 4; k++) {
            float ev = tv[rows[r] * 4 + k];
            float dv = drop[r * 4 + k];
            cr_assert(dv == 0 || dv == 2 * ev, "dropout kept %g of %g", (double)dv, (double)ev);
            want[rows[r] * 4 + k] += dv == 0 && ev != 0 ? 0 : 2;
        }
    for (int k = 0; k < 20; k++)
        cr_assert(fabs(gtv[k] - lnpart[k] - want[k]) <= 1e-5, "d table[%d]: %g - %g vs %g", k, (double)gtv[k],
                  (double)lnpart[k], want[k]);
    burnc_grads_release(g2);
    burnc_scope_end();
    burnc_tensor_t *ts[] = {table, bias, target, idx}; /* gt belonged to the scope */
    for (int i = 0; i < COUNT(ts); i++)
        burnc_tensor_release(ts[i]);
    burnc_params_release(p);
    burnc_device_release(ad);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* ---- The training run ---------------------------------------------------------------------- */

#define DIGITS_NO_MAIN
#include "../examples/digits.c"

Test(nn, digits_training_run, .timeout = 300)
{
    const char *csv = getenv("BURNC_DIGITS_CSV");
    if (!csv)
        cr_skip_test("BURNC_DIGITS_CSV is not set: python3-sklearn (the digits data set) was missing at set-up");
    burnc_device_t *dev = burnc_device_open(test_spec());
    if (!dev)
        cr_skip_test("%s is not available: %s", test_spec(), burnc_error_message());
    burnc_device_release(dev);
    digits_result r = {0};
    double t0 = (double)clock();
    cr_assert_eq(digits_train(test_spec(), csv, 30, false, &r), 0, "the run failed: %s", burnc_error_message());
    printf("nn: digits on %s: loss %.4f -> %.4f over %d epochs, test accuracy %.2f%%, %.1f s of CPU\n", test_spec(),
           r.first_loss, r.last_loss, r.epochs, 100 * r.accuracy, ((double)clock() - t0) / CLOCKS_PER_SEC);
    cr_assert(r.accuracy >= 0.95, "test accuracy %.2f%% < 95%%", 100 * r.accuracy);
    cr_assert(r.last_loss < 0.2 * r.first_loss, "loss %g -> %g", r.first_loss, r.last_loss);
    BT_LEAK_CHECK();
}

/* Two micro-batches accumulated into one gradients object give the step of the whole batch:
 * each half's mean loss has half the weight, so SGD at lr / 2 on the sum matches lr on the
 * whole (within rounding). */
Test(nn, accumulated_micro_batches_step_like_the_whole_batch)
{
    burnc_device_t *plain = bt_ref(), *ad = BT_NOT_NULL(burnc_device_autodiff(plain));
    const float xs[4][3] = {{1, -2, 0.5f}, {0.25f, 1, -1}, {2, 0, 1}, {-1, -1, 3}};
    const int64_t ys[4] = {1, 0, 1, 1};
    burnc_params_t *sets[2];
    burnc_linear_t ls[2];
    for (int k = 0; k < 2; k++) {
        BT_ASSERT_OK(burnc_device_seed(ad, 21)); /* both models start from the same draw */
        sets[k] = BT_NOT_NULL(burnc_params_new());
        BT_ASSERT_OK(burnc_linear_init(&ls[k], sets[k], ad, "fc", 3, 2, NULL));
    }
    burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(ad, BURNC_DTYPE_F32, 2, (int64_t[]){4, 3}, xs));
    burnc_tensor_t *y = BT_NOT_NULL(burnc_tensor_from_data(ad, BURNC_DTYPE_I64, 1, (int64_t[]){4}, ys));
    burnc_optim_t *whole = BT_NOT_NULL(burnc_optim_sgd(0.2, 0, 0, false));
    burnc_optim_t *halves = BT_NOT_NULL(burnc_optim_sgd(0.1, 0, 0, false));
    burnc_scope_begin();
    burnc_grads_t *g = burnc_backward(burnc_cross_entropy(burnc_linear_forward(&ls[0], x), y));
    cr_assert_not_null(g, "%s", burnc_error_message());
    BT_ASSERT_OK(burnc_optim_step(whole, sets[0], g));
    burnc_grads_release(g);
    burnc_grads_t *acc = NULL;
    for (int h = 0; h < 2; h++) {
        burnc_tensor_t *xh = burnc_slice(x, 0, 2 * h, 2 * h + 2, 1), *yh = burnc_slice(y, 0, 2 * h, 2 * h + 2, 1);
        burnc_tensor_t *loss = BT_NOT_NULL(burnc_cross_entropy(burnc_linear_forward(&ls[1], xh), yh));
        if (h == 0)
            cr_assert_not_null(acc = burnc_backward(loss), "%s", burnc_error_message());
        else
            BT_ASSERT_OK(burnc_backward_accumulate(acc, loss));
    }
    BT_ASSERT_OK(burnc_optim_step(halves, sets[1], acc));
    burnc_grads_release(acc);
    burnc_scope_end();
    for (int s = 0; s < 2; s++) {
        burnc_tensor_t *a = BT_NOT_NULL(burnc_params_get(sets[0], s)), *b = BT_NOT_NULL(burnc_params_get(sets[1], s));
        expect_close(b, a, 1e-6, 1e-7, "accumulated halves vs whole batch");
        burnc_tensor_release(a);
        burnc_tensor_release(b);
    }
    burnc_optim_release(whole);
    burnc_optim_release(halves);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_params_release(sets[0]);
    burnc_params_release(sets[1]);
    burnc_device_release(ad);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* LayerNorm + GELU + Linear blocks on cpu: gradients bitwise the same with balanced
 * checkpointing as without (each on its own autodiff handle of the one device). */
Test(nn, checkpointed_blocks_give_identical_gradients)
{
    burnc_device_t *cpu = burnc_device_open("cpu");
    if (!cpu)
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    enum { BLOCKS = 3, W = 48, B = 20 };
    float *grads[2];
    int64_t total = 0;
    for (int k = 0; k < 2; k++) {
        burnc_device_t *ad = BT_NOT_NULL(burnc_device_autodiff(cpu));
        if (k == 1)
            BT_ASSERT_OK(burnc_device_gradient_checkpointing(ad));
        BT_ASSERT_OK(burnc_device_seed(ad, 8));
        burnc_params_t *p = BT_NOT_NULL(burnc_params_new());
        burnc_layer_norm_t ln[BLOCKS];
        burnc_linear_t fc[BLOCKS];
        for (int i = 0; i < BLOCKS; i++) {
            char name[16];
            snprintf(name, sizeof name, "b%d.ln", i);
            BT_ASSERT_OK(burnc_layer_norm_init(&ln[i], p, ad, name, W, 0, BURNC_DTYPE_F32));
            snprintf(name, sizeof name, "b%d.fc", i);
            BT_ASSERT_OK(burnc_linear_init(&fc[i], p, ad, name, W, W, NULL));
        }
        burnc_tensor_t *x = BT_NOT_NULL(burnc_randn(ad, BURNC_DTYPE_F32, 2, (int64_t[]){B, W}));
        burnc_tensor_t *t = BT_NOT_NULL(burnc_randn(ad, BURNC_DTYPE_F32, 2, (int64_t[]){B, W}));
        BT_ASSERT_OK(burnc_device_sync(ad));
        burnc_scope_begin();
        burnc_tensor_t *h = x;
        for (int i = 0; i < BLOCKS; i++)
            h = burnc_linear_forward(&fc[i], burnc_gelu(burnc_layer_norm_forward(&ln[i], h)));
        burnc_tensor_t *loss = burnc_tensor_keep(burnc_mse_loss(h, t));
        burnc_scope_end();
        cr_assert_not_null(loss, "%s", burnc_error_message());
        burnc_grads_t *g = burnc_backward(loss);
        cr_assert_not_null(g, "%s", burnc_error_message());
        total = burnc_params_numel(p);
        grads[k] = malloc((size_t)total * sizeof(float));
        int64_t at = 0;
        for (int i = 0; i < burnc_params_count(p); i++) {
            burnc_tensor_t *w = BT_NOT_NULL(burnc_params_get(p, i)), *gw = BT_NOT_NULL(burnc_grad(g, w));
            int64_t n = burnc_tensor_numel(gw);
            BT_ASSERT_OK(burnc_tensor_read(gw, grads[k] + at, (size_t)n * sizeof(float)));
            at += n;
            burnc_tensor_release(gw);
            burnc_tensor_release(w);
        }
        burnc_grads_release(g);
        burnc_tensor_release(loss);
        burnc_tensor_release(t);
        burnc_tensor_release(x);
        burnc_params_release(p);
        burnc_device_release(ad);
    }
    bool nonzero = false;
    for (int64_t i = 0; i < total; i++) {
        cr_assert(!memcmp(&grads[0][i], &grads[1][i], sizeof(float)), "gradient %lld: %.9g without, %.9g balanced",
                  (long long)i, (double)grads[0][i], (double)grads[1][i]);
        nonzero |= grads[0][i] != 0;
    }
    cr_assert(nonzero, "every gradient is zero");
    free(grads[0]);
    free(grads[1]);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Weights saved from a model on one device load into a fresh model on another (the file path
 * PyTorch's state dicts take): same outputs, and the loaded parameters are leaves that train. */
Test(nn, saved_weights_load_into_another_model)
{
    burnc_device_t *devs[2];
    int nd = open_devices(devs);
    burnc_device_t *src_dev = BT_NOT_NULL(burnc_device_autodiff(devs[0]));
    burnc_device_t *dst_dev = BT_NOT_NULL(burnc_device_autodiff(devs[nd - 1]));
    char dir[] = "/tmp/burnc-nn-XXXXXX", path[64];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    burnc_params_t *a = BT_NOT_NULL(burnc_params_new()), *b = BT_NOT_NULL(burnc_params_new());
    burnc_linear_t la, lb;
    burnc_layer_norm_t na, nb;
    BT_ASSERT_OK(burnc_device_seed(src_dev, 1));
    BT_ASSERT_OK(burnc_linear_init(&la, a, src_dev, "fc", 4, 3, NULL));
    BT_ASSERT_OK(burnc_layer_norm_init(&na, a, src_dev, "norm", 3, 0, BURNC_DTYPE_F32));
    BT_ASSERT_OK(burnc_device_seed(dst_dev, 2)); /* another draw: the load must replace it */
    BT_ASSERT_OK(burnc_linear_init(&lb, b, dst_dev, "fc", 4, 3, NULL));
    BT_ASSERT_OK(burnc_layer_norm_init(&nb, b, dst_dev, "norm", 3, 0, BURNC_DTYPE_F32));
    /* move the source away from its initial values so that every slot matters */
    burnc_tensor_t *g[4];
    for (int i = 0; i < 4; i++) {
        burnc_tensor_t *w = BT_NOT_NULL(burnc_params_get(a, i));
        g[i] = BT_NOT_NULL(burnc_full(devs[0], BURNC_DTYPE_F32, burnc_tensor_rank(w), burnc_tensor_shape(w), 0.1 * (i + 1)));
        burnc_tensor_release(w);
    }
    burnc_optim_t *o = BT_NOT_NULL(burnc_optim_sgd(1, 0, 0, false));
    BT_ASSERT_OK(burnc_optim_step_tensors(o, a, g));
    BT_ASSERT_OK(burnc_safetensors_save(a, path));
    burnc_params_t *file = BT_NOT_NULL(burnc_safetensors_load(devs[0], path));
    BT_ASSERT_OK(burnc_params_assign(b, file));
    float xs[8] = {1, -2, 0.5f, 3, -1, 0, 2, 0.25f}, ya[6], yb[6];
    for (int k = 0; k < 2; k++) {
        burnc_device_t *d = k ? dst_dev : src_dev;
        burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(d, BURNC_DTYPE_F32, 2, (int64_t[]){2, 4}, xs));
        burnc_scope_begin();
        burnc_tensor_t *y = burnc_layer_norm_forward(k ? &nb : &na, burnc_linear_forward(k ? &lb : &la, x));
        bt_read_f32(y, k ? yb : ya, 6);
        burnc_scope_end();
        burnc_tensor_release(x);
    }
    for (int i = 0; i < 6; i++)
        cr_assert(fabsf(ya[i] - yb[i]) <= 1e-5f, "output %d: %g in the source model, %g loaded", i, (double)ya[i],
                  (double)yb[i]);
    for (int i = 0; i < burnc_params_count(b); i++) {
        burnc_tensor_t *w = BT_NOT_NULL(burnc_params_get(b, i));
        cr_assert(burnc_tensor_requires_grad(w), "loaded slot %d is not a leaf", i);
        burnc_tensor_release(w);
    }
    remove(path);
    rmdir(dir);
    for (int i = 0; i < 4; i++)
        burnc_tensor_release(g[i]);
    burnc_optim_release(o);
    burnc_params_release(file);
    burnc_params_release(b);
    burnc_params_release(a);
    burnc_device_release(dst_dev);
    burnc_device_release(src_dev);
    for (int d = 0; d < nd; d++)
        burnc_device_release(devs[d]);
    BT_LEAK_CHECK();
}
