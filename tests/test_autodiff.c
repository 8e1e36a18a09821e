/* Autodiff: every backward rule against central finite differences in f64 on ref, cpu gradients
 * against ref, broadcasting, accumulation, no-grad, detach, checkpointing (bitwise equality and
 * lower peak memory), the device context rules, and the errors. */
#include <threads.h>

#include "autodiff/ad.h"
#include "common.h"

/* The compiled device checked against ref: BURNC_TEST_DEVICE (cuda:0 on the GPU machine), else cpu. */
static const char *test_device(void)
{
    const char *spec = getenv("BURNC_TEST_DEVICE");
    return spec && *spec && strcmp(spec, "ref") != 0 ? spec : "cpu";
}

static burnc_device_t *open_or_skip(const char *spec)
{
    burnc_device_t *dev = burnc_device_open(spec);
    if (!dev && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip("%s is unavailable: %s", spec, burnc_error_message());
    cr_assert_not_null(dev, "burnc_device_open(%s): %s", spec, burnc_error_message());
    return dev;
}

static burnc_tensor_t *from_f64(burnc_device_t *dev, int rank, const int64_t *shape, const double *v)
{
    burnc_tensor_t *t = burnc_tensor_from_data(dev, BURNC_DTYPE_F64, rank, shape, v);
    cr_assert_not_null(t, "%s", burnc_error_message());
    return t;
}

static void read_f64(burnc_tensor_t *t, double *out, size_t n)
{
    cr_assert_not_null(t, "%s", burnc_error_message());
    cr_assert_eq(burnc_tensor_dtype(t), BURNC_DTYPE_F64);
    cr_assert_eq((size_t)burnc_tensor_numel(t), n);
    BT_ASSERT_OK(burnc_tensor_read(t, out, n * sizeof *out));
}

/* ---- Finite differences ---------------------------------------------------------------- */
/* A case: y = f(x0, x1, x2) of f64 inputs with values drawn in [lo, hi]. The checked loss is
 * sum(y * w) with fixed weights w, so every output element gets its own upstream gradient. */
typedef burnc_tensor_t *(*case_fn)(burnc_tensor_t *const *x);
typedef struct ad_case {
    const char *name;
    case_fn f;
    int n;
    int rank[3];
    int64_t shape[3][4];
    double lo, hi;
    int zero_every; /* when > 0, element i of x0 is exactly 0 where i % zero_every == 1 */
} ad_case;

static double draw(uint64_t *state, double lo, double hi)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(*state >> 11) * 0x1p-53;
}

static int64_t count_of(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    return n;
}

/* sum(f(x) * w): a new handle the caller releases (the intermediates die with the scope). */
static burnc_tensor_t *weighted_loss(const ad_case *c, burnc_tensor_t *const *x)
{
    burnc_scope_begin();
    burnc_tensor_t *y = c->f(x);
    cr_assert_not_null(y, "%s: %s", c->name, burnc_error_message());
    cr_assert_eq(burnc_tensor_dtype(y), BURNC_DTYPE_F64, "%s: result is not f64", c->name);
    int64_t n = burnc_tensor_numel(y);
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    uint64_t st = 99;
    for (int64_t i = 0; i < n; i++)
        w[i] = draw(&st, -1, 1);
    burnc_device_t *dev = burnc_tensor_device(y);
    burnc_tensor_t *wt = burnc_tensor_from_data(dev, BURNC_DTYPE_F64, burnc_tensor_rank(y), burnc_tensor_shape(y), w);
    burnc_device_release(dev);
    free(w);
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(y, wt), 0, NULL, false));
    burnc_scope_end();
    cr_assert_not_null(loss, "%s: %s", c->name, burnc_error_message());
    return loss;
}

static double loss_value(burnc_device_t *dev, const ad_case *c, double *const *vals)
{
    burnc_tensor_t *x[3] = {0};
    for (int k = 0; k < c->n; k++)
        x[k] = from_f64(dev, c->rank[k], c->shape[k], vals[k]);
    burnc_tensor_t *loss = weighted_loss(c, x);
    double v;
    read_f64(loss, &v, 1);
    burnc_tensor_release(loss);
    for (int k = 0; k < c->n; k++)
        burnc_tensor_release(x[k]);
    return v;
}

/* The gradients of every input through autodiff on dev (one buffer per input). */
static void analytic(burnc_device_t *ad, const ad_case *c, double *const *vals, double **grads)
{
    burnc_tensor_t *x[3] = {0}, *x0[3] = {0};
    for (int k = 0; k < c->n; k++) {
        x0[k] = from_f64(ad, c->rank[k], c->shape[k], vals[k]);
        x[k] = burnc_tensor_require_grad(x0[k]);
        cr_assert_not_null(x[k], "%s: %s", c->name, burnc_error_message());
    }
    burnc_tensor_t *loss = weighted_loss(c, x);
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s: backward: %s", c->name, burnc_error_message());
    for (int k = 0; k < c->n; k++) {
        burnc_tensor_t *gk = burnc_grad(g, x[k]);
        cr_assert_not_null(gk, "%s: grad %d: %s", c->name, k, burnc_error_message());
        cr_assert_eq(burnc_tensor_rank(gk), c->rank[k], "%s: gradient %d has rank %d, input %d", c->name, k,
                     burnc_tensor_rank(gk), c->rank[k]);
        for (int d = 0; d < c->rank[k]; d++)
            cr_assert_eq(burnc_tensor_shape(gk)[d], c->shape[k][d], "%s: gradient %d axis %d has size %lld, not %lld",
                         c->name, k, d, (long long)burnc_tensor_shape(gk)[d], (long long)c->shape[k][d]);
        cr_assert(!burnc_tensor_requires_grad(gk), "%s: a gradient tracks gradients", c->name);
        read_f64(gk, grads[k], (size_t)count_of(c->rank[k], c->shape[k]));
        burnc_tensor_release(gk);
    }
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    for (int k = 0; k < c->n; k++) {
        burnc_tensor_release(x[k]);
        burnc_tensor_release(x0[k]);
    }
}

/* Every rule on ref against central differences (relative error <= 1e-6) and against itself
 * under balanced checkpointing (bitwise: every op replays), and when `other` is given, that
 * device's gradients against ref's (relative 1e-9). */
static void check_cases(const ad_case *cases, int ncases, const char *other)
{
    burnc_device_t *ref = open_or_skip("ref"), *ref_ad = burnc_device_autodiff(ref);
    burnc_device_t *ref_bal = burnc_device_autodiff(ref);
    BT_ASSERT_OK(burnc_device_gradient_checkpointing(ref_bal));
    burnc_device_t *dev = other ? open_or_skip(other) : NULL, *dev_ad = dev ? burnc_device_autodiff(dev) : NULL;
    burnc_device_t *dev_bal = dev ? burnc_device_autodiff(dev) : NULL;
    if (dev_bal)
        BT_ASSERT_OK(burnc_device_gradient_checkpointing(dev_bal));
    for (int ci = 0; ci < ncases; ci++) {
        const ad_case *c = &cases[ci];
        double *vals[3] = {0}, *ga[3] = {0}, *go[3] = {0}, *gb[3] = {0};
        uint64_t st = 12345 + (uint64_t)ci;
        for (int k = 0; k < c->n; k++) {
            int64_t m = count_of(c->rank[k], c->shape[k]);
            vals[k] = malloc((size_t)m * sizeof(double));
            ga[k] = malloc((size_t)m * sizeof(double));
            go[k] = malloc((size_t)m * sizeof(double));
            gb[k] = malloc((size_t)m * sizeof(double));
            for (int64_t i = 0; i < m; i++)
                vals[k][i] = k == 0 && c->zero_every && i % c->zero_every == 1 ? 0 : draw(&st, c->lo, c->hi);
        }
        analytic(ref_ad, c, vals, ga);
        analytic(other ? dev_bal : ref_bal, c, vals, gb);
        if (other)
            analytic(dev_ad, c, vals, go);
        for (int k = 0; k < c->n; k++)
            for (int64_t i = 0; i < count_of(c->rank[k], c->shape[k]); i++) {
                double without = other ? go[k][i] : ga[k][i];
                cr_assert(memcmp(&gb[k][i], &without, sizeof(double)) == 0,
                          "%s on %s: d/dx%d[%lld] = %.17g with balanced checkpointing, %.17g without", c->name,
                          other ? other : "ref", k, (long long)i, gb[k][i], without);
            }
        for (int k = 0; k < c->n; k++) {
            int64_t m = count_of(c->rank[k], c->shape[k]);
            for (int64_t i = 0; i < m; i++) {
                double v = vals[k][i], h = 1e-6 * fmax(1, fabs(v));
                vals[k][i] = v + h;
                double up = loss_value(ref, c, vals);
                vals[k][i] = v - h;
                double down = loss_value(ref, c, vals);
                vals[k][i] = v;
                double num = (up - down) / (2 * h), err = fabs(ga[k][i] - num) / fmax(1, fabs(num));
                cr_assert(err <= 1e-6, "%s: d/dx%d[%lld] = %.12g, finite differences %.12g (relative error %.2g)",
                          c->name, k, (long long)i, ga[k][i], num, err);
            }
        }
        if (dev_ad) {
            for (int k = 0; k < c->n; k++)
                for (int64_t i = 0; i < count_of(c->rank[k], c->shape[k]); i++)
                    cr_assert(fabs(go[k][i] - ga[k][i]) <= 1e-9 * fmax(1, fabs(ga[k][i])),
                              "%s on %s: d/dx%d[%lld] = %.17g, ref %.17g", c->name, other, k, (long long)i, go[k][i],
                              ga[k][i]);
        }
        for (int k = 0; k < c->n; k++) {
            free(vals[k]);
            free(ga[k]);
            free(go[k]);
            free(gb[k]);
        }
    }
    burnc_device_release(dev_ad);
    burnc_device_release(dev);
    burnc_device_release(dev_bal);
    burnc_device_release(ref_bal);
    burnc_device_release(ref_ad);
    burnc_device_release(ref);
}

/* ---- The cases ---- */
#define UNARY_CASE(name)                                                               \
    static burnc_tensor_t *f_##name(burnc_tensor_t *const *x) { return burnc_##name(x[0]); }
#define BINARY_CASE(name)                                                                        \
    static burnc_tensor_t *f_##name(burnc_tensor_t *const *x) { return burnc_##name(x[0], x[1]); } \
    static burnc_tensor_t *f_##name##_s(burnc_tensor_t *const *x) { return burnc_##name##_scalar(x[0], 1.3); }
UNARY_CASE(neg) UNARY_CASE(abs) UNARY_CASE(exp) UNARY_CASE(exp2) UNARY_CASE(expm1) UNARY_CASE(log)
UNARY_CASE(log2) UNARY_CASE(log1p) UNARY_CASE(sqrt) UNARY_CASE(rsqrt) UNARY_CASE(reciprocal) UNARY_CASE(sin)
UNARY_CASE(cos) UNARY_CASE(tan) UNARY_CASE(tanh) UNARY_CASE(sigmoid) UNARY_CASE(relu) UNARY_CASE(gelu)
UNARY_CASE(silu) UNARY_CASE(erf)
BINARY_CASE(add) BINARY_CASE(sub) BINARY_CASE(mul) BINARY_CASE(div) BINARY_CASE(pow) BINARY_CASE(maximum)
BINARY_CASE(minimum) BINARY_CASE(remainder) BINARY_CASE(atan2)

static burnc_tensor_t *f_clamp(burnc_tensor_t *const *x) { return burnc_clamp(x[0], -0.5, 0.6); }
static burnc_tensor_t *f_where(burnc_tensor_t *const *x) { return burnc_where(burnc_gt_scalar(x[2], 0), x[0], x[1]); }
/* x0 is also the condition: it gets a gradient only through the selected branch */
static burnc_tensor_t *f_where_self(burnc_tensor_t *const *x) { return burnc_where(x[0], x[0], x[1]); }

#define S(...) {__VA_ARGS__}
static const ad_case elementwise_cases[] = {
    {"neg", f_neg, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"abs", f_abs, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"exp", f_exp, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"exp2", f_exp2, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"expm1", f_expm1, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"log", f_log, 1, {2}, {S(2, 3)}, 0.2, 3, 0},
    {"log2", f_log2, 1, {2}, {S(2, 3)}, 0.2, 3, 0},
    {"log1p", f_log1p, 1, {2}, {S(2, 3)}, -0.5, 3, 0},
    {"sqrt", f_sqrt, 1, {2}, {S(2, 3)}, 0.2, 3, 0},
    {"rsqrt", f_rsqrt, 1, {2}, {S(2, 3)}, 0.2, 3, 0},
    {"reciprocal", f_reciprocal, 1, {2}, {S(2, 3)}, 0.3, 3, 0},
    {"sin", f_sin, 1, {2}, {S(2, 3)}, -3, 3, 0},
    {"cos", f_cos, 1, {2}, {S(2, 3)}, -3, 3, 0},
    {"tan", f_tan, 1, {2}, {S(2, 3)}, -1.2, 1.2, 0},
    {"tanh", f_tanh, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"sigmoid", f_sigmoid, 1, {2}, {S(2, 3)}, -3, 3, 0},
    {"relu", f_relu, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"gelu", f_gelu, 1, {2}, {S(2, 3)}, -3, 3, 0},
    {"silu", f_silu, 1, {2}, {S(2, 3)}, -3, 3, 0},
    {"erf", f_erf, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"clamp", f_clamp, 1, {2}, {S(3, 4)}, -1, 1, 0},
    {"add broadcast", f_add, 2, {2, 1}, {S(2, 3), S(3)}, -2, 2, 0},
    {"sub broadcast", f_sub, 2, {2, 2}, {S(2, 1), S(1, 3)}, -2, 2, 0},
    {"mul broadcast", f_mul, 2, {3, 2}, {S(2, 1, 3), S(4, 1)}, -2, 2, 0},
    {"div", f_div, 2, {2, 2}, {S(2, 3), S(2, 3)}, 0.5, 2, 0},
    {"pow", f_pow, 2, {2, 1}, {S(2, 3), S(3)}, 0.5, 1.8, 0},
    {"maximum", f_maximum, 2, {2, 2}, {S(2, 3), S(2, 3)}, -2, 2, 0},
    {"minimum", f_minimum, 2, {2, 1}, {S(2, 3), S(3)}, -2, 2, 0},
    {"remainder", f_remainder, 2, {1, 1}, {S(5), S(5)}, 1.1, 1.9, 0},
    {"atan2", f_atan2, 2, {2, 2}, {S(2, 3), S(1, 3)}, -2, 2, 0},
    {"add_scalar", f_add_s, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"sub_scalar", f_sub_s, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"mul_scalar", f_mul_s, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"div_scalar", f_div_s, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"pow_scalar", f_pow_s, 1, {2}, {S(2, 3)}, 0.3, 2, 0},
    {"maximum_scalar", f_maximum_s, 1, {2}, {S(2, 3)}, 0, 2.5, 0},
    {"minimum_scalar", f_minimum_s, 1, {2}, {S(2, 3)}, 0, 2.5, 0},
    {"remainder_scalar", f_remainder_s, 1, {2}, {S(2, 3)}, 0.1, 1.2, 0},
    {"atan2_scalar", f_atan2_s, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"where", f_where, 3, {2, 1, 2}, {S(2, 3), S(3), S(2, 3)}, -2, 2, 0},
    {"where self", f_where_self, 2, {2, 2}, {S(2, 3), S(2, 3)}, -2, 2, 0},
};

Test(autodiff, elementwise_rules_against_finite_differences)
{
    check_cases(elementwise_cases, sizeof elementwise_cases / sizeof *elementwise_cases, NULL);
    BT_LEAK_CHECK();
}

Test(autodiff, elementwise_rules_device_against_ref)
{
    check_cases(elementwise_cases, sizeof elementwise_cases / sizeof *elementwise_cases, test_device());
    BT_LEAK_CHECK();
}

/* Reductions, composites, matmul. */
static const int ax1[1] = {1}, ax02[2] = {0, 2};
static burnc_tensor_t *f_sum1(burnc_tensor_t *const *x) { return burnc_sum(x[0], 1, ax1, false); }
static burnc_tensor_t *f_sum_all(burnc_tensor_t *const *x) { return burnc_sum(x[0], 0, NULL, false); }
static burnc_tensor_t *f_mean02(burnc_tensor_t *const *x) { return burnc_mean(x[0], 2, ax02, true); }
static burnc_tensor_t *f_prod1(burnc_tensor_t *const *x) { return burnc_prod(x[0], 1, ax1, true); }
static burnc_tensor_t *f_max1(burnc_tensor_t *const *x) { return burnc_max(x[0], 1, ax1, false); }
static burnc_tensor_t *f_min_all(burnc_tensor_t *const *x) { return burnc_min(x[0], 0, NULL, true); }
static burnc_tensor_t *f_var1(burnc_tensor_t *const *x) { return burnc_var(x[0], 1, ax1, 1, false); }
static burnc_tensor_t *f_std02(burnc_tensor_t *const *x) { return burnc_std(x[0], 2, ax02, 0, true); }
static burnc_tensor_t *f_softmax(burnc_tensor_t *const *x) { return burnc_softmax(x[0], -1); }
static burnc_tensor_t *f_log_softmax(burnc_tensor_t *const *x) { return burnc_log_softmax(x[0], 0); }
static burnc_tensor_t *f_layer_norm(burnc_tensor_t *const *x) { return burnc_layer_norm(x[0], 1, 1e-5); }
static burnc_tensor_t *f_layer_norm_affine(burnc_tensor_t *const *x)
{
    return burnc_layer_norm_affine(x[0], 2, x[1], x[2], 1e-5);
}
static burnc_tensor_t *f_matmul(burnc_tensor_t *const *x) { return burnc_matmul(x[0], x[1]); }
static burnc_tensor_t *f_matmul_wt(burnc_tensor_t *const *x) { return burnc_matmul(x[0], burnc_transpose(x[1], 0, 1)); }
static burnc_tensor_t *f_matmul_xt(burnc_tensor_t *const *x) { return burnc_matmul(burnc_transpose(x[0], 0, 1), x[1]); }

static const ad_case reduce_cases[] = {
    {"sum axis 1", f_sum1, 1, {3}, {S(2, 3, 2)}, -2, 2, 0},
    {"sum all", f_sum_all, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"mean axes 0,2 keepdim", f_mean02, 1, {3}, {S(2, 3, 2)}, -2, 2, 0},
    {"prod axis 1", f_prod1, 1, {2}, {S(3, 4)}, 0.5, 1.5, 0},
    {"prod with one zero per row", f_prod1, 1, {2}, {S(3, 4)}, 0.5, 1.5, 4},
    {"prod with two zeros per row", f_prod1, 1, {2}, {S(3, 4)}, 0.5, 1.5, 2},
    {"max axis 1", f_max1, 1, {3}, {S(2, 4, 2)}, -2, 2, 0},
    {"min all keepdim", f_min_all, 1, {2}, {S(3, 3)}, -2, 2, 0},
    {"var axis 1", f_var1, 1, {2}, {S(3, 4)}, -2, 2, 0},
    {"std axes 0,2", f_std02, 1, {3}, {S(2, 3, 2)}, -2, 2, 0},
    {"softmax", f_softmax, 1, {2}, {S(3, 4)}, -2, 2, 0},
    {"log_softmax", f_log_softmax, 1, {2}, {S(3, 4)}, -2, 2, 0},
    {"layer_norm", f_layer_norm, 1, {2}, {S(3, 4)}, -2, 2, 0},
    {"layer_norm_affine", f_layer_norm_affine, 3, {3, 2, 1}, {S(2, 2, 3), S(2, 3), S(3)}, -2, 2, 0},
    {"matmul", f_matmul, 2, {2, 2}, {S(2, 3), S(3, 4)}, -2, 2, 0},
    {"matmul batched broadcast", f_matmul, 2, {3, 2}, {S(2, 2, 3), S(3, 2)}, -2, 2, 0},
    {"matmul batch both", f_matmul, 2, {3, 4}, {S(3, 2, 3), S(2, 1, 3, 2)}, -2, 2, 0},
    {"matmul vector-matrix", f_matmul, 2, {1, 2}, {S(3), S(3, 4)}, -2, 2, 0},
    {"matmul matrix-vector", f_matmul, 2, {3, 1}, {S(2, 2, 3), S(3)}, -2, 2, 0},
    {"matmul vector-vector", f_matmul, 2, {1, 1}, {S(3), S(3)}, -2, 2, 0},
    {"matmul transposed weight", f_matmul_wt, 2, {2, 2}, {S(2, 3), S(4, 3)}, -2, 2, 0},
    {"matmul transposed input", f_matmul_xt, 2, {2, 2}, {S(3, 2), S(3, 4)}, -2, 2, 0},
    {"matmul, B's gradient in row chunks", f_matmul, 2, {2, 2}, {S(2048, 2), S(2, 2)}, -2, 2, 0},
    {"matmul transposed weight, its gradient in row chunks", f_matmul_wt, 2, {2, 2}, {S(2048, 2), S(3, 2)}, -2, 2, 0},
};

Test(autodiff, reduction_matmul_rules_against_finite_differences)
{
    check_cases(reduce_cases, sizeof reduce_cases / sizeof *reduce_cases, NULL);
    BT_LEAK_CHECK();
}

Test(autodiff, reduction_matmul_rules_device_against_ref)
{
    check_cases(reduce_cases, sizeof reduce_cases / sizeof *reduce_cases, test_device());
    BT_LEAK_CHECK();
}

/* Views, copies, index ops: each result is multiplied by itself so that values matter. */
static burnc_tensor_t *sq(burnc_tensor_t *y) { return burnc_mul(y, burnc_sin(y)); }
static burnc_tensor_t *f_reshape(burnc_tensor_t *const *x)
{
    return sq(burnc_reshape(x[0], 2, (const int64_t[]){3, -1}));
}
static burnc_tensor_t *f_reshape_copy(burnc_tensor_t *const *x) /* a transposed view cannot be viewed flat */
{
    return sq(burnc_reshape(burnc_transpose(x[0], 0, 1), 1, (const int64_t[]){-1}));
}
static burnc_tensor_t *f_permute(burnc_tensor_t *const *x) { return sq(burnc_permute(x[0], 3, (const int[]){2, 0, 1})); }
static burnc_tensor_t *f_expand(burnc_tensor_t *const *x)
{
    return sq(burnc_expand(x[0], 3, (const int64_t[]){2, 3, -1}));
}
static burnc_tensor_t *f_slice(burnc_tensor_t *const *x) { return sq(burnc_slice(x[0], 1, 1, INT64_MAX, 2)); }
static burnc_tensor_t *f_slice_neg(burnc_tensor_t *const *x) { return sq(burnc_slice(x[0], 0, -1, INT64_MIN, -2)); }
static burnc_tensor_t *f_flip(burnc_tensor_t *const *x) { return burnc_mul(burnc_flip(x[0], 1, ax1), x[0]); }
static burnc_tensor_t *f_squeeze(burnc_tensor_t *const *x)
{
    return sq(burnc_unsqueeze(burnc_squeeze(x[0], 0, NULL), 0));
}
static burnc_tensor_t *f_contiguous(burnc_tensor_t *const *x) { return sq(burnc_contiguous(burnc_transpose(x[0], 0, 1))); }
static burnc_tensor_t *f_cat(burnc_tensor_t *const *x) { return sq(burnc_cat(3, (burnc_tensor_t *[]){x[0], x[1], x[0]}, 1)); }
static burnc_tensor_t *f_stack(burnc_tensor_t *const *x) { return sq(burnc_stack(2, (burnc_tensor_t *[]){x[0], x[1]}, -1)); }
static burnc_tensor_t *f_pad(burnc_tensor_t *const *x)
{
    return sq(burnc_pad(x[0], (const int64_t[]){1, 2, -1, 1}, 0.5));
}
static burnc_tensor_t *index_of(burnc_tensor_t *x, int rank, const int64_t *shape, const int64_t *v)
{
    burnc_device_t *dev = burnc_tensor_device(x);
    burnc_tensor_t *t = burnc_tensor_from_data(dev, BURNC_DTYPE_I64, rank, shape, v);
    burnc_device_release(dev);
    return t;
}
static burnc_tensor_t *f_index_select(burnc_tensor_t *const *x)
{
    return sq(burnc_index_select(x[0], 1, index_of(x[0], 1, (const int64_t[]){4}, (const int64_t[]){2, 0, 2, -1})));
}
static burnc_tensor_t *f_gather(burnc_tensor_t *const *x)
{
    return sq(burnc_gather(x[0], 0, index_of(x[0], 2, (const int64_t[]){2, 3}, (const int64_t[]){1, 0, 1, 1, 1, 0})));
}
static burnc_tensor_t *f_scatter_add(burnc_tensor_t *const *x)
{
    burnc_tensor_t *idx = index_of(x[0], 2, (const int64_t[]){2, 2}, (const int64_t[]){0, 2, 0, 1});
    return sq(burnc_scatter_add(x[0], 1, idx, x[1]));
}
static burnc_tensor_t *f_index_add(burnc_tensor_t *const *x)
{
    burnc_tensor_t *idx = index_of(x[0], 1, (const int64_t[]){3}, (const int64_t[]){2, 0, 2});
    return sq(burnc_index_add(x[0], 0, idx, x[1]));
}
static burnc_tensor_t *f_slice_assign(burnc_tensor_t *const *x)
{
    return sq(burnc_slice_assign(x[0], 1, 0, 4, 2, x[1])); /* x1 [3, 1] broadcast to the slice [3, 2] */
}
static burnc_tensor_t *f_to_device(burnc_tensor_t *const *x)
{
    burnc_device_t *other = burnc_device_open("ref:3");
    burnc_tensor_t *moved = burnc_tensor_to_device(sq(x[0]), other);
    burnc_device_t *home = burnc_tensor_device(x[0]);
    burnc_tensor_t *back = burnc_tensor_to_device(burnc_exp(moved), home);
    burnc_device_release(home);
    burnc_device_release(other);
    return back;
}

static const ad_case movement_cases[] = {
    {"reshape", f_reshape, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"reshape that copies", f_reshape_copy, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"permute", f_permute, 1, {3}, {S(2, 3, 2)}, -2, 2, 0},
    {"expand", f_expand, 1, {2}, {S(1, 2)}, -2, 2, 0},
    {"slice step 2", f_slice, 1, {2}, {S(2, 5)}, -2, 2, 0},
    {"slice step -2", f_slice_neg, 1, {2}, {S(5, 2)}, -2, 2, 0},
    {"flip", f_flip, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"squeeze unsqueeze", f_squeeze, 1, {3}, {S(2, 1, 3)}, -2, 2, 0},
    {"contiguous", f_contiguous, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"cat", f_cat, 2, {2, 2}, {S(2, 1), S(2, 3)}, -2, 2, 0},
    {"stack", f_stack, 2, {2, 2}, {S(2, 3), S(2, 3)}, -2, 2, 0},
    {"pad", f_pad, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"index_select", f_index_select, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"gather", f_gather, 1, {2}, {S(2, 3)}, -2, 2, 0},
    {"scatter_add", f_scatter_add, 2, {2, 2}, {S(2, 3), S(2, 2)}, -2, 2, 0},
    {"index_add", f_index_add, 2, {2, 2}, {S(3, 2), S(3, 2)}, -2, 2, 0},
    {"slice_assign", f_slice_assign, 2, {2, 2}, {S(3, 4), S(3, 1)}, -2, 2, 0},
    {"to_device and back", f_to_device, 1, {2}, {S(2, 3)}, -1, 1, 0},
};

Test(autodiff, movement_rules_against_finite_differences)
{
    check_cases(movement_cases, sizeof movement_cases / sizeof *movement_cases, NULL);
    BT_LEAK_CHECK();
}

Test(autodiff, movement_rules_device_against_ref)
{
    check_cases(movement_cases, sizeof movement_cases / sizeof *movement_cases, test_device());
    BT_LEAK_CHECK();
}

/* The end of a test that took a weight's gradient inside a scope on dev (an autodiff handle of
 * plain). */
static void end_weight_step(burnc_grads_t *g, burnc_tensor_t *w, burnc_device_t *dev, burnc_device_t *plain)
{
    burnc_grads_release(g);
    burnc_tensor_release(w);
    burnc_scope_end();
    burnc_device_release(dev);
    burnc_device_release(plain);
}

/* n f32 values drawn in [-2, 2]. */
static void draw_f32(uint64_t *st, float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)draw(st, -2, 2);
}

/* x @ w^T (a Linear's weight kept [out, in]): the weight's gradient comes out dense, as the
 * optimizer reads it (no copy), and bitwise the product gy^T @ x it is: the matmul rule makes
 * it as (x^T @ gy)^T's transpose, the same chain over k with each product's factors swapped. */
Test(autodiff, transposed_weight_gradient_dense_and_exact)
{
    burnc_device_t *plain = open_or_skip(test_device()), *dev = burnc_device_autodiff(plain);
    cr_assert_not_null(dev, "%s", burnc_error_message());
    enum { B = 37, I = 19, O = 11 };
    static float xv[B * I], wv[O * I], rv[B * O], got[O * I], want[O * I];
    uint64_t st = 7;
    draw_f32(&st, xv, B * I);
    draw_f32(&st, wv, O * I);
    draw_f32(&st, rv, B * O);
    burnc_scope_begin();
    burnc_tensor_t *x = bt_f32(dev, 2, (int64_t[]){B, I}, xv), *r = bt_f32(dev, 2, (int64_t[]){B, O}, rv);
    burnc_tensor_t *w = burnc_tensor_keep(burnc_tensor_require_grad(bt_f32(dev, 2, (int64_t[]){O, I}, wv)));
    burnc_tensor_t *y = burnc_matmul(x, burnc_transpose(w, 0, 1));
    burnc_grads_t *g = burnc_backward(burnc_sum(burnc_mul(y, r), 0, NULL, false));
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gw = BT_NOT_NULL(burnc_grad(g, w));
    const int64_t *strides = burnc_tensor_strides(gw);
    cr_assert(strides[0] == I && strides[1] == 1, "the weight's gradient has strides %lld, %lld",
              (long long)strides[0], (long long)strides[1]);
    bt_read_f32(gw, got, O * I);
    bt_read_f32(BT_NOT_NULL(burnc_matmul(burnc_transpose(r, 0, 1), x)), want, O * I);
    for (int i = 0; i < O * I; i++)
        cr_assert(!memcmp(&got[i], &want[i], sizeof *got), "%s: dw[%d] is %a, r^T @ x %a", test_device(), i,
                  (double)got[i], (double)want[i]);
    burnc_tensor_release(gw);
    end_weight_step(g, w, dev, plain);
    BT_LEAK_CHECK();
}

/* A weight gradient over a batch of 2 to 16 chunks of 1024 rows is the chunks' products added
 * in chunk order (autodiff/rules.c, rows_product_chunked): bitwise
 * that composition of public ops on the same device, for a weight used as is (x @ w) and
 * transposed (x @ w^T, which keeps its gradient dense), and within the f32 chain's bound of
 * the one product over the whole batch. A batch of 3000 (not a multiple) keeps that product. */
static void check_chunked_weight_gradient(int64_t batch, bool wt)
{
    burnc_device_t *plain = open_or_skip(test_device()), *dev = burnc_device_autodiff(plain);
    cr_assert_not_null(dev, "%s", burnc_error_message());
    enum { I = 5, O = 4, MAXB = 3072 };
    static float xv[MAXB * I], wv[O * I], rv[MAXB * O], got[O * I], chunked[O * I], whole[O * I];
    uint64_t st = 11;
    draw_f32(&st, xv, batch * I);
    draw_f32(&st, wv, O * I);
    draw_f32(&st, rv, batch * O);
    burnc_scope_begin();
    burnc_tensor_t *x = bt_f32(dev, 2, (int64_t[]){batch, I}, xv), *r = bt_f32(dev, 2, (int64_t[]){batch, O}, rv);
    int64_t ws[2] = {wt ? O : I, wt ? I : O};
    burnc_tensor_t *w = burnc_tensor_keep(burnc_tensor_require_grad(bt_f32(dev, 2, ws, wv)));
    burnc_tensor_t *y = burnc_matmul(x, wt ? burnc_transpose(w, 0, 1) : w);
    burnc_grads_t *g = burnc_backward(burnc_sum(burnc_mul(y, r), 0, NULL, false));
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gw = BT_NOT_NULL(burnc_grad(g, w));
    bt_read_f32(gw, got, O * I);
    /* [O, I] (wt) or [I, O]: p^T @ q with p, q = r, x (wt) or x, r */
    burnc_tensor_t *p = wt ? r : x, *q = wt ? x : r;
    int64_t c = batch / 1024, pc = burnc_tensor_shape(p)[1], qc = burnc_tensor_shape(q)[1];
    bt_read_f32(BT_NOT_NULL(burnc_matmul(burnc_transpose(p, 0, 1), q)), whole, O * I);
    if (batch % 1024 == 0) {
        burnc_tensor_t *pp = burnc_transpose(burnc_reshape(p, 3, (int64_t[]){c, 1024, pc}), 1, 2);
        burnc_tensor_t *parts = burnc_matmul(pp, burnc_reshape(q, 3, (int64_t[]){c, 1024, qc}));
        burnc_tensor_t *sum = burnc_slice(parts, 0, 0, 1, 1);
        for (int64_t i = 1; i < c; i++)
            sum = burnc_add(sum, burnc_slice(parts, 0, i, i + 1, 1));
        bt_read_f32(BT_NOT_NULL(sum), chunked, O * I);
    } else {
        memcpy(chunked, whole, sizeof whole);
    }
    for (int i = 0; i < O * I; i++) {
        cr_assert(!memcmp(&got[i], &chunked[i], sizeof *got), "%s, batch %lld: dw[%d] is %a, the chunks' sum %a",
                  test_device(), (long long)batch, i, (double)got[i], (double)chunked[i]);
        int a = wt ? i / I : i / O, b = wt ? i % I : i % O;
        double bound = 0;
        for (int64_t k = 0; k < batch; k++)
            bound += fabs((double)(wt ? rv[k * O + a] * xv[k * I + b] : xv[k * I + a] * rv[k * O + b]));
        cr_assert(fabs((double)got[i] - (double)whole[i]) <= 2.0 * (double)batch * 0x1p-24 * bound,
                  "%s, batch %lld: dw[%d] is %a, the whole product %a", test_device(), (long long)batch, i,
                  (double)got[i], (double)whole[i]);
    }
    burnc_tensor_release(gw);
    end_weight_step(g, w, dev, plain);
}

Test(autodiff, weight_gradient_over_a_long_batch_sums_row_chunks)
{
    check_chunked_weight_gradient(3072, true);
    check_chunked_weight_gradient(2048, false);
    check_chunked_weight_gradient(3000, true);
    BT_LEAK_CHECK();
}

/* The records of the first flush the runtime logs ("...: flushed N records, ..."). */
static void first_flush(void *user, const char *topic, const char *msg)
{
    const char *f = strcmp(topic, "runtime") ? NULL : strstr(msg, ": flushed ");
    if (f && *(int *)user < 0)
        *(int *)user = atoi(f + strlen(": flushed "));
}

/* The loss of x @ w: sum(exp(x @ w)), recorded on x's device. */
static burnc_tensor_t *exp_matmul_loss(burnc_tensor_t *x, burnc_tensor_t *w)
{
    return burnc_sum(burnc_exp(burnc_matmul(x, w)), 0, NULL, false);
}

/* burnc_backward runs the recorded forward pass before recording the backward pass on a GPU
 * (cuda, vulkan), so the device starts on it while the host records; on cpu and ref the first
 * flush comes at the matmul's rule and holds backward records too. */
Test(autodiff, backward_starts_the_forward_pass_first_on_a_gpu)
{
    burnc_device_t *plain = open_or_skip(test_device()), *dev = burnc_device_autodiff(plain);
    cr_assert_not_null(dev, "%s", burnc_error_message());
    burnc_scope_begin();
    float xv[6 * 5], wv[5 * 3];
    uint64_t st = 11;
    for (int i = 0; i < 30; i++)
        xv[i] = (float)draw(&st, -1, 1);
    for (int i = 0; i < 15; i++)
        wv[i] = (float)draw(&st, -1, 1);
    burnc_tensor_t *x = bt_f32(dev, 2, (int64_t[]){6, 5}, xv);
    burnc_tensor_t *w = burnc_tensor_keep(burnc_tensor_require_grad(bt_f32(dev, 2, (int64_t[]){5, 3}, wv)));
    cr_assert_eq(burnc_device_sync(dev), BURNC_OK, "%s", burnc_error_message());
    int forward = -1, first = -1;
    burnc_log_set_callback(first_flush, &forward); /* the forward pass alone */
    BT_NOT_NULL(exp_matmul_loss(x, w));
    cr_assert_eq(burnc_device_flush(dev), BURNC_OK, "%s", burnc_error_message());
    burnc_log_set_callback(first_flush, &first); /* the same, then its backward pass */
    burnc_grads_t *g = burnc_backward(BT_NOT_NULL(exp_matmul_loss(x, w)));
    burnc_log_set_callback(NULL, NULL);
    cr_assert_not_null(g, "%s", burnc_error_message());
    cr_assert(forward > 0, "the forward pass flushed %d records", forward);
    burnc_device_type_t type = burnc_device_type(plain);
    if (type == BURNC_DEVICE_CUDA || type == BURNC_DEVICE_VULKAN)
        cr_assert_eq(first, forward, "%s: the first flush of backward ran %d records, the forward pass %d",
                     test_device(), first, forward);
    else
        cr_assert(first > forward, "%s: the first flush of backward ran %d records, the forward pass %d",
                  test_device(), first, forward);
    end_weight_step(g, w, dev, plain);
    BT_LEAK_CHECK();
}

Test(autodiff, basic_mul_sum_exp_matmul)
{
    burnc_device_t *plain = open_or_skip("ref");
    burnc_device_t *dev = burnc_device_autodiff(plain);
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    const double a[6] = {0.5, -1, 2, 0.25, 1.5, -0.75}, b[6] = {1, 2, -1, 0.5, 3, -2};
    burnc_tensor_t *a0 = from_f64(dev, 2, s23, a), *b0 = from_f64(dev, 2, s32, b);
    burnc_tensor_t *x = burnc_tensor_require_grad(a0), *w = burnc_tensor_require_grad(b0);
    burnc_scope_begin();
    /* loss = sum(exp(x) * x) + sum(x @ w) */
    burnc_tensor_t *l1 = burnc_sum(burnc_mul(burnc_exp(x), x), 0, NULL, false);
    burnc_tensor_t *l2 = burnc_sum(burnc_matmul(x, w), 0, NULL, false);
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_add(l1, l2));
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gx = burnc_grad(g, x), *gw = burnc_grad(g, w);
    double vx[6], vw[6];
    read_f64(gx, vx, 6);
    read_f64(gw, vw, 6);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) {
            double xv = a[i * 3 + k];
            double want = exp(xv) * (1 + xv) + b[k * 2] + b[k * 2 + 1];
            cr_assert_float_eq(vx[i * 3 + k], want, 1e-12, "dx[%d][%d] = %g, want %g", i, k, vx[i * 3 + k], want);
        }
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 2; j++) {
            double want = a[k] + a[3 + k];
            cr_assert_float_eq(vw[k * 2 + j], want, 1e-12, "dw[%d][%d] = %g, want %g", k, j, vw[k * 2 + j], want);
        }
    burnc_tensor_release(gx);
    burnc_tensor_release(gw);
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    burnc_tensor_release(x);
    burnc_tensor_release(w);
    burnc_tensor_release(a0);
    burnc_tensor_release(b0);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* ---- Single behaviours ------------------------------------------------------------------- */
Test(autodiff, cast_gradient_comes_back_in_the_input_dtype)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    const int64_t s4[1] = {4};
    const double x[4] = {0.1, -2, 3.5, 1e-3};
    const float w[4] = {0.3f, -1.25f, 2, 0.1f};
    burnc_tensor_t *x0 = from_f64(dev, 1, s4, x), *xl = burnc_tensor_require_grad(x0);
    burnc_tensor_t *wt = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, s4, w);
    burnc_scope_begin();
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(burnc_cast(xl, BURNC_DTYPE_F32), wt), 0, NULL, false));
    burnc_scope_end();
    cr_assert_eq(burnc_tensor_dtype(loss), BURNC_DTYPE_F32);
    burnc_grads_t *g = burnc_backward(loss);
    burnc_tensor_t *gx = burnc_grad(g, xl);
    double v[4];
    read_f64(gx, v, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(v[i], (double)w[i], "d/dx[%d] = %.17g, want %.17g", i, v[i], (double)w[i]);
    burnc_tensor_release(gx);
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    burnc_tensor_release(wt);
    burnc_tensor_release(xl);
    burnc_tensor_release(x0);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* loss = sum(x * c) for a leaf x [2, 3] and constant c: its gradient is c. */
static burnc_tensor_t *linear_loss(burnc_tensor_t *x, const double *c)
{
    const int64_t s23[2] = {2, 3};
    burnc_device_t *dev = burnc_tensor_device(x);
    burnc_scope_begin();
    burnc_tensor_t *ct = burnc_tensor_from_data(dev, BURNC_DTYPE_F64, 2, s23, c);
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(x, ct), 0, NULL, false));
    burnc_scope_end();
    burnc_device_release(dev);
    cr_assert_not_null(loss, "%s", burnc_error_message());
    return loss;
}

static void expect_grad(const burnc_grads_t *g, burnc_tensor_t *x, const double *want, int n)
{
    burnc_tensor_t *gx = burnc_grad(g, x);
    double v[16];
    read_f64(gx, v, (size_t)n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(v[i], want[i], "gradient[%d] = %.17g, want %.17g", i, v[i], want[i]);
    burnc_tensor_release(gx);
}

Test(autodiff, broadcast_gradients_are_summed_to_the_input_shape)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    const int64_t s3[1] = {3}, s21[2] = {2, 1}, s23[2] = {2, 3};
    const double b[3] = {1, 2, 3}, c[2] = {-1, 4}, m[6] = {1, 2, 3, 4, 5, 6};
    burnc_tensor_t *b0 = from_f64(dev, 1, s3, b), *c0 = from_f64(dev, 2, s21, c), *m0 = from_f64(dev, 2, s23, m);
    burnc_tensor_t *bl = burnc_tensor_require_grad(b0), *cl = burnc_tensor_require_grad(c0);
    burnc_scope_begin();
    /* sum((b + c) * m): d/db[j] = sum_i m[i][j], d/dc[i] = sum_j m[i][j] */
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(burnc_add(bl, cl), m0), 0, NULL, false));
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gb = burnc_grad(g, bl), *gc = burnc_grad(g, cl);
    cr_assert_eq(burnc_tensor_rank(gb), 1);
    cr_assert_eq(burnc_tensor_shape(gb)[0], 3);
    cr_assert_eq(burnc_tensor_rank(gc), 2);
    cr_assert(burnc_tensor_shape(gc)[0] == 2 && burnc_tensor_shape(gc)[1] == 1);
    expect_grad(g, bl, (const double[]){5, 7, 9}, 3);
    expect_grad(g, cl, (const double[]){6, 15}, 2);
    burnc_tensor_release(gb);
    burnc_tensor_release(gc);
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    burnc_tensor_t *all[] = {bl, cl, b0, c0, m0};
    for (int i = 0; i < 5; i++)
        burnc_tensor_release(all[i]);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

Test(autodiff, accumulation_over_several_losses)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    const int64_t s23[2] = {2, 3};
    const double x[6] = {1, 2, 3, 4, 5, 6}, c1[6] = {1, 0, 2, 0, 3, 0}, c2[6] = {0.5, 1, 1, 1, 1, -4};
    const double y[6] = {0};
    burnc_tensor_t *x0 = from_f64(dev, 2, s23, x), *xl = burnc_tensor_require_grad(x0);
    burnc_tensor_t *y0 = from_f64(dev, 2, s23, y), *yl = burnc_tensor_require_grad(y0);
    burnc_tensor_t *l1 = linear_loss(xl, c1);
    burnc_grads_t *g = burnc_backward(l1);
    cr_assert_not_null(g, "%s", burnc_error_message());
    expect_grad(g, xl, c1, 6);
    /* y is a leaf the loss does not depend on: zeros */
    expect_grad(g, yl, y, 6);
    burnc_tensor_t *l2 = linear_loss(xl, c2);
    BT_ASSERT_OK(burnc_backward_accumulate(g, l2));
    double sum[6];
    for (int i = 0; i < 6; i++)
        sum[i] = c1[i] + c2[i];
    expect_grad(g, xl, sum, 6);
    /* a failing accumulation leaves the gradients as they were */
    BT_ASSERT_STATUS(burnc_backward_accumulate(g, l2), BURNC_ERR_INVALID_ARGUMENT, "already consumed");
    expect_grad(g, xl, sum, 6);
    burnc_grads_release(g);
    burnc_tensor_t *all[] = {l1, l2, xl, x0, yl, y0};
    for (int i = 0; i < 6; i++)
        burnc_tensor_release(all[i]);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

Test(autodiff, no_grad_scope_and_detach_track_nothing)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    const int64_t s23[2] = {2, 3};
    const double x[6] = {1, -2, 3, 4, 0.5, 6};
    burnc_tensor_t *x0 = from_f64(dev, 2, s23, x), *xl = burnc_tensor_require_grad(x0);
    cr_assert(burnc_tensor_requires_grad(xl));
    cr_assert(!burnc_tensor_requires_grad(x0));
    burnc_scope_begin();
    burnc_no_grad_begin();
    burnc_no_grad_begin(); /* nestable */
    burnc_no_grad_end();
    burnc_tensor_t *inside = burnc_tensor_keep(burnc_exp(xl));
    burnc_no_grad_end();
    burnc_no_grad_end(); /* an unmatched end is ignored */
    burnc_tensor_t *after = burnc_tensor_keep(burnc_exp(xl));
    burnc_scope_end();
    cr_assert(!burnc_tensor_requires_grad(inside), "an op under no-grad tracks gradients");
    cr_assert(burnc_tensor_requires_grad(after), "no-grad did not end");
    BT_ASSERT_FAILS(burnc_backward(inside), BURNC_ERR_INVALID_ARGUMENT, "tracks no gradient");
    /* detach: sum(x * detach(x)) has gradient x, not 2x */
    burnc_tensor_t *d = burnc_tensor_detach(xl);
    cr_assert(!burnc_tensor_requires_grad(d));
    burnc_device_t *dd = burnc_tensor_device(d);
    cr_assert(burnc_device_is_autodiff(dd), "detach lost the autodiff context");
    burnc_device_release(dd);
    burnc_scope_begin();
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(xl, d), 0, NULL, false));
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    expect_grad(g, xl, x, 6);
    burnc_grads_release(g);
    burnc_tensor_t *all[] = {inside, after, d, loss, xl, x0};
    for (int i = 0; i < 6; i++)
        burnc_tensor_release(all[i]);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

Test(autodiff, device_context_rules)
{
    burnc_device_t *plain = open_or_skip("ref");
    cr_assert(!burnc_device_is_autodiff(plain));
    BT_ASSERT_STATUS(burnc_device_gradient_checkpointing(plain), BURNC_ERR_INVALID_ARGUMENT, "without autodiff");
    BT_ASSERT_STATUS(burnc_device_gradient_checkpointing(NULL), BURNC_ERR_INVALID_ARGUMENT, "NULL");
    burnc_device_t *ad = burnc_device_autodiff(plain);
    cr_assert(burnc_device_is_autodiff(ad));
    cr_assert(burnc_device_equal(ad, plain) && burnc_device_equal(plain, ad), "equality must ignore autodiff");
    cr_assert_str_eq(burnc_device_spec(ad), "ref");
    cr_assert_eq(burnc_device_gradient_checkpointing_strategy(ad), BURNC_CHECKPOINT_NONE);
    BT_ASSERT_OK(burnc_device_gradient_checkpointing(ad));
    cr_assert_eq(burnc_device_gradient_checkpointing_strategy(ad), BURNC_CHECKPOINT_BALANCED);
    cr_assert_eq(burnc_device_gradient_checkpointing_strategy(plain), BURNC_CHECKPOINT_NONE);
    burnc_device_t *again = burnc_device_autodiff(ad); /* idempotent, keeps the strategy */
    cr_assert(burnc_device_is_autodiff(again) && burnc_device_equal(again, ad));
    cr_assert_eq(burnc_device_gradient_checkpointing_strategy(again), BURNC_CHECKPOINT_BALANCED);
    burnc_device_t *back = burnc_device_without_autodiff(again);
    cr_assert(!burnc_device_is_autodiff(back) && burnc_device_equal(back, plain));
    burnc_device_t *back2 = burnc_device_without_autodiff(plain);
    cr_assert(!burnc_device_is_autodiff(back2));
    /* device functions take the handle */
    BT_ASSERT_OK(burnc_device_sync(ad));
    burnc_memory_report_t rep;
    BT_ASSERT_OK(burnc_device_memory(ad, &rep));
    cr_assert_eq(burnc_device_float_dtype(ad), BURNC_DTYPE_F32);

    /* tensors carry their context; a plain one cannot require grad */
    const int64_t s2[1] = {2};
    const double v[2] = {1.5, -2};
    burnc_tensor_t *p = from_f64(plain, 1, s2, v), *a = from_f64(ad, 1, s2, v);
    BT_ASSERT_FAILS(burnc_tensor_require_grad(p), BURNC_ERR_INVALID_ARGUMENT, "without autodiff");
    burnc_device_t *pd = burnc_tensor_device(p), *adv = burnc_tensor_device(a);
    cr_assert(!burnc_device_is_autodiff(pd) && burnc_device_is_autodiff(adv));
    burnc_device_release(pd);
    burnc_device_release(adv);

    /* to_device keeps the tensor's own context, and the gradient flows back through the copy */
    burnc_device_t *other = open_or_skip("ref:2");
    burnc_tensor_t *al = burnc_tensor_require_grad(a);
    burnc_scope_begin();
    burnc_tensor_t *moved = burnc_tensor_to_device(al, other);
    burnc_tensor_t *pm = burnc_tensor_to_device(p, ad);
    cr_assert(burnc_tensor_requires_grad(moved), "to_device lost tracking");
    burnc_device_t *md = burnc_tensor_device(moved), *pmd = burnc_tensor_device(pm);
    cr_assert(burnc_device_is_autodiff(md) && burnc_device_equal(md, other));
    cr_assert(!burnc_device_is_autodiff(pmd), "a plain tensor became autodiff by moving");
    cr_assert_eq(burnc_device_gradient_checkpointing_strategy(md), BURNC_CHECKPOINT_BALANCED);
    burnc_device_release(md);
    burnc_device_release(pmd);
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(moved, moved), 0, NULL, false));
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    expect_grad(g, al, (const double[]){3, -4}, 2);
    burnc_grads_release(g);
    burnc_tensor_t *all[] = {loss, al, a, p};
    for (int i = 0; i < 4; i++)
        burnc_tensor_release(all[i]);
    burnc_device_t *devs[] = {other, back2, back, again, ad, plain};
    for (int i = 0; i < 6; i++)
        burnc_device_release(devs[i]);
    BT_LEAK_CHECK();
}

Test(autodiff, errors_leave_the_library_usable)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    const int64_t s23[2] = {2, 3};
    const double x[6] = {1, 2, 3, 4, 5, 6}, c[6] = {1, 1, 2, 2, 3, 3};
    burnc_tensor_t *x0 = from_f64(dev, 2, s23, x), *xl = burnc_tensor_require_grad(x0);
    /* backward on a tensor that tracks nothing */
    BT_ASSERT_FAILS(burnc_backward(x0), BURNC_ERR_INVALID_ARGUMENT, "tracks no gradient");
    BT_ASSERT_FAILS(burnc_backward(NULL), BURNC_ERR_INVALID_ARGUMENT, "NULL");
    /* integer leaves, NULL arguments */
    const int64_t iv[2] = {1, 2}, s2[1] = {2};
    burnc_tensor_t *it = burnc_tensor_from_data(dev, BURNC_DTYPE_I64, 1, s2, iv);
    BT_ASSERT_FAILS(burnc_tensor_require_grad(it), BURNC_ERR_UNSUPPORTED_DTYPE, "float");
    cr_assert_null(burnc_tensor_require_grad(NULL));
    BT_ASSERT_STATUS(burnc_backward_accumulate(NULL, xl), BURNC_ERR_INVALID_ARGUMENT, "grads is NULL");
    /* a second backward over the same graph */
    burnc_tensor_t *loss = linear_loss(xl, c);
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    BT_ASSERT_FAILS(burnc_backward(loss), BURNC_ERR_INVALID_ARGUMENT, "one backward per graph");
    /* grad of a tensor that does not require grad, of a non-leaf */
    BT_ASSERT_FAILS(burnc_grad(g, x0), BURNC_ERR_INVALID_ARGUMENT, "does not require grad");
    burnc_scope_begin();
    burnc_tensor_t *mid = burnc_tensor_keep(burnc_exp(xl));
    burnc_scope_end();
    BT_ASSERT_FAILS(burnc_grad(g, mid), BURNC_ERR_INVALID_ARGUMENT, "not a leaf");
    BT_ASSERT_FAILS(burnc_grad(NULL, xl), BURNC_ERR_INVALID_ARGUMENT, "grads is NULL");
    burnc_grads_release(g);
    burnc_grads_release(NULL);

    /* an op without a backward rule: nothing records one in the library (sources have no
     * inputs), so the test attaches a node of one through the internal hook */
    burnc_tensor_t *r = burnc_exp(x0);
    r = ad_track(IR_OP_RAND, 1, &xl, r, NULL);
    cr_assert(burnc_tensor_requires_grad(r));
    burnc_scope_begin();
    burnc_tensor_t *l2 = burnc_tensor_keep(burnc_sum(burnc_mul(r, mid), 0, NULL, false));
    burnc_scope_end();
    BT_ASSERT_FAILS(burnc_backward(l2), BURNC_ERR_INVALID_ARGUMENT, "op rand has no backward rule");

    /* still usable: a fresh graph from the same leaf works */
    burnc_tensor_t *l3 = linear_loss(xl, c);
    g = burnc_backward(l3);
    cr_assert_not_null(g, "%s", burnc_error_message());
    expect_grad(g, xl, c, 6);
    burnc_grads_release(g);
    burnc_tensor_t *all[] = {l3, l2, r, mid, loss, it, xl, x0};
    for (int i = 0; i < 8; i++)
        burnc_tensor_release(all[i]);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* ---- Checkpointing ----------------------------------------------------------------------- */
/* One step of a deep MLP, blocks of h = gelu(layer_norm_affine(h @ w + b)), then a
 * log_softmax loss: returns every parameter's gradient (f32), concatenated. */
typedef struct mlp {
    int batch, width, blocks;
} mlp;

static float *mlp_step(burnc_device_t *ad, const mlp *m, size_t *count, uint64_t *held)
{
    int B = m->batch, D = m->width, L = m->blocks;
    const int64_t sx[2] = {B, D}, sw[2] = {D, D}, sb[1] = {D};
    BT_ASSERT_OK(burnc_device_seed(ad, 7));
    burnc_tensor_t *x = burnc_randn(ad, BURNC_DTYPE_F32, 2, sx);
    burnc_tensor_t *params[4 * 16] = {0};
    int np = 0;
    burnc_scope_begin();
    for (int i = 0; i < L; i++) {
        burnc_tensor_t *w = burnc_mul_scalar(burnc_randn(ad, BURNC_DTYPE_F32, 2, sw), 1.0 / sqrt(D));
        burnc_tensor_t *b = burnc_mul_scalar(burnc_rand(ad, BURNC_DTYPE_F32, 1, sb), 0.1);
        burnc_tensor_t *gamma = burnc_add_scalar(burnc_rand(ad, BURNC_DTYPE_F32, 1, sb), 0.5);
        burnc_tensor_t *beta = burnc_mul_scalar(burnc_randn(ad, BURNC_DTYPE_F32, 1, sb), 0.1);
        burnc_tensor_t *p4[4] = {w, b, gamma, beta};
        for (int k = 0; k < 4; k++)
            params[np++] = burnc_tensor_keep(burnc_tensor_require_grad(p4[k]));
    }
    burnc_scope_end();
    for (int i = 0; i < np; i++)
        cr_assert_not_null(params[i], "%s", burnc_error_message());
    /* materialize the inputs, as a training loop holding its parameters has */
    BT_ASSERT_OK(burnc_device_sync(ad));
    burnc_scope_begin();
    burnc_tensor_t *h = x;
    for (int i = 0; i < L; i++) {
        burnc_tensor_t *z = burnc_add(burnc_matmul(h, params[4 * i]), params[4 * i + 1]);
        h = burnc_gelu(burnc_layer_norm_affine(z, 1, params[4 * i + 2], params[4 * i + 3], 1e-5));
    }
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_neg(burnc_mean(burnc_log_softmax(h, 1), 0, NULL, false)));
    burnc_scope_end();
    float lv;
    BT_ASSERT_OK(burnc_tensor_read(loss, &lv, sizeof lv)); /* runs the forward pass */
    cr_assert(isfinite(lv));
    burnc_memory_report_t rep;
    BT_ASSERT_OK(burnc_device_memory(ad, &rep));
    *held = rep.bytes_in_use; /* what the tape keeps for the backward pass, besides the inputs */
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    size_t total = 0;
    for (int i = 0; i < np; i++)
        total += (size_t)burnc_tensor_numel(params[i]);
    float *out = malloc(total * sizeof *out);
    size_t at = 0;
    for (int i = 0; i < np; i++) {
        burnc_tensor_t *gi = burnc_grad(g, params[i]);
        size_t n = (size_t)burnc_tensor_numel(gi);
        BT_ASSERT_OK(burnc_tensor_read(gi, out + at, n * sizeof *out));
        at += n;
        burnc_tensor_release(gi);
    }
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    for (int i = 0; i < np; i++)
        burnc_tensor_release(params[i]);
    burnc_tensor_release(x);
    BT_ASSERT_OK(burnc_device_sync(ad));
    *count = total;
    return out;
}

static uint64_t step_peak(const char *spec, bool balanced, const mlp *m, float **grads, size_t *count,
                          uint64_t *held)
{
    burnc_device_t *plain = open_or_skip(spec), *ad = burnc_device_autodiff(plain);
    /* recomputed values live in fused kernels' registers: the figure is the fused pipeline's */
    BT_ASSERT_OK(burnc_device_set_fusion(ad, true));
    if (balanced)
        BT_ASSERT_OK(burnc_device_gradient_checkpointing(ad));
    BT_ASSERT_OK(burnc_device_memory_cleanup(plain));
    *grads = mlp_step(ad, m, count, held);
    burnc_memory_report_t rep;
    BT_ASSERT_OK(burnc_device_memory(plain, &rep));
    BT_ASSERT_OK(burnc_device_memory_cleanup(plain));
    burnc_device_release(ad);
    burnc_device_release(plain);
    return rep.bytes_peak;
}

static void check_equal_grads(const char *what, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(memcmp(&a[i], &b[i], sizeof *a) == 0, "%s: gradient %zu is %.9g balanced, %.9g without", what, i,
                  a[i], b[i]);
}

Test(autodiff, checkpointing_gives_identical_gradients_and_keeps_less_on_ref)
{
    /* Two independent reference devices, so that each pool's figures are its own run's. The
     * ref device runs a whole flush before freeing anything and materializes every op's result,
     * so its peak is the forward batch either way: what checkpointing changes there is the
     * memory the tape holds between the forward and the backward pass. */
    const mlp m = {.batch = 64, .width = 64, .blocks = 6};
    float *gn, *gb;
    size_t nn, nb;
    uint64_t hn, hb;
    uint64_t pn = step_peak("ref:11", false, &m, &gn, &nn, &hn), pb = step_peak("ref:12", true, &m, &gb, &nb, &hb);
    cr_assert_eq(nn, nb);
    check_equal_grads("ref", gb, gn, nn);
    cr_log_info("ref: held after forward %llu bytes without checkpointing, %llu balanced; peak %llu and %llu",
                (unsigned long long)hn, (unsigned long long)hb, (unsigned long long)pn, (unsigned long long)pb);
    cr_assert(hb < 0.7 * hn, "balanced checkpointing holds %llu bytes, not 30%% below %llu", (unsigned long long)hb,
              (unsigned long long)hn);
    free(gn);
    free(gb);
    BT_LEAK_CHECK();
}

Test(autodiff, checkpointing_gives_identical_gradients_and_lower_peak_on_device)
{
    /* a compiled device is one per process: run the balanced step first, so that the later
     * peak, max(balanced, none), is the run without checkpointing when that one is higher */
    const char *spec = test_device();
    const mlp m = {.batch = 256, .width = 128, .blocks = 8};
    float *gn, *gb;
    size_t nn, nb;
    uint64_t hn, hb;
    uint64_t pb = step_peak(spec, true, &m, &gb, &nb, &hb), pn = step_peak(spec, false, &m, &gn, &nn, &hn);
    cr_assert_eq(nn, nb);
    check_equal_grads(spec, gb, gn, nn);
    cr_log_info("%s: peak bytes %llu without checkpointing, %llu balanced (%.1f%% lower); held after forward %llu "
                "and %llu", spec, (unsigned long long)pn, (unsigned long long)pb, 100.0 * (1 - (double)pb / (double)pn),
                (unsigned long long)hn, (unsigned long long)hb);
    cr_assert(pb < 0.7 * pn, "balanced checkpointing peak %llu is not 30%% below %llu", (unsigned long long)pb,
              (unsigned long long)pn);
    free(gn);
    free(gb);
    BT_LEAK_CHECK();
}

/* A checkpointing test's loss of x (in the caller's scope), after checking x's nodes. */
typedef burnc_tensor_t *(*ckpt_loss_fn)(burnc_tensor_t *x, bool balanced);

/* d/dx loss(x) in f32 on spec, balanced or not, for x of `shape` holding v. */
static void ckpt_grad(const char *spec, bool balanced, int rank, const int64_t *shape, const float *v, ckpt_loss_fn f,
                      float *out)
{
    burnc_device_t *plain = open_or_skip(spec), *ad = burnc_device_autodiff(plain);
    if (balanced)
        BT_ASSERT_OK(burnc_device_gradient_checkpointing(ad));
    burnc_tensor_t *x0 = burnc_tensor_from_data(ad, BURNC_DTYPE_F32, rank, shape, v);
    burnc_tensor_t *x = burnc_tensor_require_grad(x0);
    burnc_scope_begin();
    burnc_tensor_t *loss = burnc_tensor_keep(f(x, balanced));
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gx = burnc_grad(g, x);
    BT_ASSERT_OK(burnc_tensor_read(gx, out, (size_t)burnc_tensor_numel(gx) * sizeof *out));
    burnc_tensor_release(gx);
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    burnc_tensor_release(x);
    burnc_tensor_release(x0);
    burnc_device_release(ad);
    burnc_device_release(plain);
}

/* The two runs of ckpt_grad, bitwise equal. */
static void check_ckpt_equal(int rank, const int64_t *shape, const float *v, ckpt_loss_fn f, int64_t n)
{
    float *plain = malloc((size_t)n * sizeof *plain), *kept = malloc((size_t)n * sizeof *kept);
    ckpt_grad(test_device(), false, rank, shape, v, f, plain);
    ckpt_grad(test_device(), true, rank, shape, v, f, kept);
    for (int64_t i = 0; i < n; i++)
        cr_assert(memcmp(&plain[i], &kept[i], sizeof *kept) == 0, "gradient %lld: %.9g balanced, %.9g without",
                  (long long)i, (double)kept[i], (double)plain[i]);
    free(plain);
    free(kept);
}

/* sum(exp(gelu(2 x) + 1)). With checkpointing the gelu node keeps its output and replays 2 x,
 * while exp and the add keep nothing (rules.c, costly). */
static burnc_tensor_t *gelu_chain_loss(burnc_tensor_t *x, bool balanced)
{
    burnc_tensor_t *z = burnc_mul_scalar(x, 2.0), *y = burnc_gelu(z), *e = burnc_exp(burnc_add_scalar(y, 1.0));
    cr_assert_not_null(e, "%s", burnc_error_message());
    cr_assert_eq(y->ad->out != NULL, balanced || (ad_rule_of(IR_OP_GELU).needs & AD_OUT), "gelu's output kept");
    if (balanced) {
        cr_assert(!y->ad->recompute && z->ad->recompute && e->ad->recompute && !e->ad->out,
                  "balanced: gelu should keep its output, the multiply and exp recompute theirs");
        cr_assert_null(y->ad->in[0].value, "balanced: gelu keeps its input though the multiply replays it");
    }
    return burnc_sum(e, 0, NULL, false);
}

/* Balanced checkpointing keeps the outputs of element-wise ops dearer to recompute than to
 * reread (gelu, pow), recomputes the cheap ones (exp, add), and the gradients stay bitwise the
 * same. */
Test(autodiff, balanced_checkpointing_keeps_costly_elementwise_outputs)
{
    cr_assert(ad_rule_of(IR_OP_GELU).needs & AD_COMPUTE, "gelu");
    cr_assert(ad_rule_of(IR_OP_POW).needs & AD_COMPUTE, "pow");
    cr_assert(!(ad_rule_of(IR_OP_EXP).needs & AD_COMPUTE), "exp");
    cr_assert(!(ad_rule_of(IR_OP_ADD).needs & AD_COMPUTE), "add");
    cr_assert(!(ad_rule_of(IR_OP_CAST).needs & AD_COMPUTE), "cast");
    enum { N = 4099 };
    static float v[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)(i % 97) * 0.0625f - 3.0f;
    check_ckpt_equal(1, (int64_t[]){N}, v, gelu_chain_loss, N);
    BT_LEAK_CHECK();
}

/* sum(y sin x) for a LayerNorm without affine, y = (x - mean) / sqrt(var + eps) by rows; with
 * checkpointing, the node of 1 / sqrt(var + eps), which the product reads by broadcast, keeps
 * its value, and the centring (read at its own shape) replays. */
static burnc_tensor_t *layer_norm_loss(burnc_tensor_t *x, bool balanced)
{
    const int last = 1;
    burnc_tensor_t *xc = burnc_sub(x, burnc_mean(x, 1, &last, true));
    burnc_tensor_t *r = burnc_reciprocal(burnc_sqrt(burnc_add_scalar(burnc_mean(burnc_mul(xc, xc), 1, &last, true), 1e-5)));
    burnc_tensor_t *y = burnc_mul(xc, r);
    cr_assert_not_null(y, "%s", burnc_error_message());
    if (balanced)
        cr_assert(r->ad->out && !r->ad->recompute && xc->ad->recompute && !xc->ad->out,
                  "balanced: 1 / sqrt(var + eps) should keep its value, the centring replay it");
    return burnc_sum(burnc_mul(y, burnc_sin(x)), 0, NULL, false);
}

/* Balanced checkpointing keeps a value read by broadcast (smaller than its reader: replayed it
 * would be a kernel of its own before each reader), with bitwise the same gradients. */
Test(autodiff, balanced_checkpointing_keeps_values_read_by_broadcast)
{
    enum { ROWS = 37, COLS = 61, N = ROWS * COLS };
    static float v[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)((i * 37) % 101) * 0.03125f - 1.5f;
    check_ckpt_equal(2, (int64_t[]){ROWS, COLS}, v, layer_norm_loss, N);
    BT_LEAK_CHECK();
}

/* gelu's gradient in f32 keeps its relative accuracy in the tail, where gelu' is tiny and
 * negative: the rule is one gelu_grad op. Written as 0.5 (1 + erf(x / sqrt 2)) + x phi(x) it
 * was off by 1.6e-3 at x = -5 and 2-3% below -5.5 (1 + erf cancels). Against Phi(x) + x phi(x)
 * in long double, within 4 ulps of the larger term (test_math's bound for gelu_grad). */
Test(autodiff, gelu_gradient_in_the_tail)
{
    static const float xs[] = {-13.0f, -10.0f, -8.0f,  -6.0f, -5.5f, -5.0f, -4.0f,
                               -3.0f,  -0.75f, -0.5f, 0.0f,  1.0f,  3.0f};
    enum { N = (int)(sizeof xs / sizeof xs[0]) };
    burnc_device_t *plain = open_or_skip(test_device()), *ad = burnc_device_autodiff(plain);
    int64_t n = N;
    burnc_tensor_t *x0 = burnc_tensor_from_data(ad, BURNC_DTYPE_F32, 1, &n, xs);
    burnc_tensor_t *x = burnc_tensor_require_grad(x0);
    burnc_scope_begin();
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_gelu(x), 0, NULL, false));
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gx = burnc_grad(g, x);
    float got[N];
    BT_ASSERT_OK(burnc_tensor_read(gx, got, sizeof got));
    for (int i = 0; i < N; i++) {
        long double v = xs[i], cdf = 0.5L * erfcl(-v * 0.70710678118654752440L);
        long double xpdf = v * expl(-0.5L * v * v) * 0.39894228040143267794L, want = cdf + xpdf;
        long double mag = fabsl(want) > cdf ? fabsl(want) : cdf;
        if (fabsl(xpdf) > mag)
            mag = fabsl(xpdf);
        long double ulp = ldexpl(1.0L, ilogbl(mag) - 23);
        cr_assert(fabsl(got[i] - want) <= 4 * ulp, "gelu'(%g) = %.9g, want %.12Lg (%.2Lf ulps)", (double)xs[i],
                  (double)got[i], want, fabsl(got[i] - want) / ulp);
    }
    burnc_tensor_release(gx);
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    burnc_tensor_release(x);
    burnc_tensor_release(x0);
    burnc_device_release(ad);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* The header's example, checked against 2/(B N) x^T (x w - y). */
Test(autodiff, header_example_least_squares_step)
{
    burnc_device_t *dev = open_or_skip("ref"), *ad = burnc_device_autodiff(dev);
    enum { B = 4, K = 3, N = 2 };
    const int64_t sx[2] = {B, K}, sw[2] = {K, N}, sy[2] = {B, N};
    double xv[B * K], wv[K * N], yv[B * N];
    uint64_t st = 5;
    for (int i = 0; i < B * K; i++)
        xv[i] = draw(&st, -1, 1);
    for (int i = 0; i < K * N; i++)
        wv[i] = draw(&st, -1, 1);
    for (int i = 0; i < B * N; i++)
        yv[i] = draw(&st, -1, 1);
    burnc_tensor_t *x = from_f64(ad, 2, sx, xv), *w = from_f64(ad, 2, sw, wv), *y = from_f64(ad, 2, sy, yv);

    burnc_tensor_t *wl = burnc_tensor_require_grad(w);
    burnc_scope_begin();
    burnc_tensor_t *err = burnc_sub(burnc_matmul(x, wl), y);
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_mean(burnc_mul(err, err), 0, NULL, false));
    burnc_tensor_release(err); /* the scope owns it, and the tape keeps its own handle */
    burnc_scope_end();
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_scope_begin();
    burnc_no_grad_begin();
    burnc_tensor_t *dw = burnc_tensor_keep(burnc_grad(g, wl));
    burnc_tensor_t *next = burnc_tensor_keep(burnc_sub(wl, burnc_mul_scalar(dw, 0.1)));
    burnc_no_grad_end();
    burnc_scope_end();
    burnc_grads_release(g);
    cr_assert(!burnc_tensor_requires_grad(next));

    double got[K * N], upd[K * N];
    read_f64(dw, got, K * N);
    read_f64(next, upd, K * N);
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            double want = 0;
            for (int b = 0; b < B; b++) {
                double e = -yv[b * N + n];
                for (int j = 0; j < K; j++)
                    e += xv[b * K + j] * wv[j * N + n];
                want += 2.0 / (B * N) * xv[b * K + k] * e;
            }
            cr_assert_float_eq(got[k * N + n], want, 1e-14, "dw[%d][%d] = %.17g, want %.17g", k, n, got[k * N + n],
                               want);
            cr_assert_eq(upd[k * N + n], wv[k * N + n] - 0.1 * got[k * N + n]);
        }
    burnc_tensor_t *all[] = {dw, next, loss, wl, x, w, y};
    for (int i = 0; i < 7; i++)
        burnc_tensor_release(all[i]);
    burnc_device_release(ad);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(autodiff, mlp_step_device_against_ref)
{
    /* the whole step in f32: ref accumulates matmuls in double, the compiled device in f32 */
    const mlp m = {.batch = 32, .width = 48, .blocks = 3};
    float *gr, *gd;
    size_t nr, nd;
    uint64_t hr, hd;
    step_peak("ref:13", false, &m, &gr, &nr, &hr);
    step_peak(test_device(), true, &m, &gd, &nd, &hd);
    cr_assert_eq(nr, nd);
    float scale = 0;
    for (size_t i = 0; i < nr; i++)
        scale = fmaxf(scale, fabsf(gr[i]));
    cr_assert(scale > 0, "all gradients are zero");
    for (size_t i = 0; i < nr; i++)
        cr_assert(fabsf(gd[i] - gr[i]) <= 1e-4f * scale, "gradient %zu: %.9g on %s, %.9g on ref", i, gd[i],
                  test_device(), gr[i]);
    free(gr);
    free(gd);
    BT_LEAK_CHECK();
}

Test(autodiff, half_precision_leaves_get_gradients_in_their_dtype)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    const int64_t s4[1] = {4};
    const float xf[4] = {0.5f, -1.25f, 2, 3};
    uint16_t xb[4], xh[4];
    for (int i = 0; i < 4; i++) {
        xb[i] = burnc_f32_to_bf16(xf[i]);
        xh[i] = burnc_f32_to_f16(xf[i]);
    }
    burnc_tensor_t *b0 = burnc_tensor_from_data(dev, BURNC_DTYPE_BF16, 1, s4, xb);
    burnc_tensor_t *h0 = burnc_tensor_from_data(dev, BURNC_DTYPE_F16, 1, s4, xh);
    burnc_tensor_t *b = burnc_tensor_require_grad(b0), *h = burnc_tensor_require_grad(h0);
    burnc_scope_begin();
    /* sum(b * b + 3 h): the product promotes bf16 with f16 to f32 */
    burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_add(burnc_mul(b, b), burnc_mul_scalar(h, 3)), 0, NULL,
                                                       false));
    burnc_scope_end();
    cr_assert_eq(burnc_tensor_dtype(loss), BURNC_DTYPE_F32);
    burnc_grads_t *g = burnc_backward(loss);
    cr_assert_not_null(g, "%s", burnc_error_message());
    burnc_tensor_t *gb = burnc_grad(g, b), *gh = burnc_grad(g, h);
    cr_assert_eq(burnc_tensor_dtype(gb), BURNC_DTYPE_BF16);
    cr_assert_eq(burnc_tensor_dtype(gh), BURNC_DTYPE_F16);
    uint16_t vb[4], vh[4];
    BT_ASSERT_OK(burnc_tensor_read(gb, vb, sizeof vb));
    BT_ASSERT_OK(burnc_tensor_read(gh, vh, sizeof vh));
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(burnc_bf16_to_f32(vb[i]), 2 * xf[i], "d/db[%d] = %g", i, burnc_bf16_to_f32(vb[i]));
        cr_assert_eq(burnc_f16_to_f32(vh[i]), 3.0f, "d/dh[%d] = %g", i, burnc_f16_to_f32(vh[i]));
    }
    burnc_tensor_t *all[] = {gb, gh, loss, b, h, b0, h0};
    for (int i = 0; i < 7; i++)
        burnc_tensor_release(all[i]);
    burnc_grads_release(g);
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}

/* Threads record and differentiate their own graphs on one shared autodiff device. */
typedef struct thread_job {
    burnc_device_t *dev;
    double scale;
    double got[6];
    burnc_status_t status;
} thread_job;

static int thread_step(void *arg)
{
    thread_job *j = arg;
    const int64_t s23[2] = {2, 3};
    double x[6];
    for (int i = 0; i < 6; i++)
        x[i] = j->scale * (i + 1);
    for (int rep = 0; rep < 20; rep++) {
        burnc_tensor_t *x0 = burnc_tensor_from_data(j->dev, BURNC_DTYPE_F64, 2, s23, x);
        burnc_tensor_t *xl = burnc_tensor_require_grad(x0);
        burnc_scope_begin();
        burnc_tensor_t *loss = burnc_tensor_keep(burnc_sum(burnc_mul(burnc_exp(xl), xl), 0, NULL, false));
        burnc_scope_end();
        burnc_grads_t *g = burnc_backward(loss);
        burnc_tensor_t *gx = burnc_grad(g, xl);
        j->status = gx ? burnc_tensor_read(gx, j->got, sizeof j->got) : burnc_error_code();
        burnc_tensor_release(gx);
        burnc_grads_release(g);
        burnc_tensor_release(loss);
        burnc_tensor_release(xl);
        burnc_tensor_release(x0);
        if (j->status != BURNC_OK)
            break;
    }
    return 0;
}

Test(autodiff, threads_differentiate_their_own_graphs)
{
    burnc_device_t *plain = open_or_skip("ref"), *dev = burnc_device_autodiff(plain);
    thread_job jobs[4];
    thrd_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){.dev = dev, .scale = 0.1 * (i + 1)};
        cr_assert_eq(thrd_create(&th[i], thread_step, &jobs[i]), thrd_success);
    }
    for (int i = 0; i < 4; i++)
        thrd_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(jobs[i].status, BURNC_OK, "thread %d: %s", i, burnc_status_name(jobs[i].status));
        for (int k = 0; k < 6; k++) {
            double x = jobs[i].scale * (k + 1), want = exp(x) * (1 + x);
            cr_assert_float_eq(jobs[i].got[k], want, 1e-12 * want, "thread %d: d/dx[%d] = %.17g, want %.17g", i, k,
                               jobs[i].got[k], want);
        }
    }
    burnc_device_release(dev);
    burnc_device_release(plain);
    BT_LEAK_CHECK();
}
