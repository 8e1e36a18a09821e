/* The cpu device: opening and naming, every op family against ref on the same inputs, the
 * asynchronous queue (ordering of host writes, reads, frees and errors; several threads), fused
 * against eager bitwise, reductions independent of the thread count, LLVM never loaded by work
 * that compiles nothing, the memory pool.
 *
 * Tolerances against ref: bitwise for exact ops (arithmetic, comparisons, casts, movement,
 * index ops, rounding, sqrt); for one math function (exp, ..., pow, atan2) 2 ulps in f32 and
 * f64 (the kernel math is faithful, include/burnc.h, and ref rounds once), 4 for compositions
 * (gelu, silu, rsqrt, randn, softmax), 1 ulp in f16/bf16 (one more rounding of an f32 result);
 * reductions 1e-5 relative in f32 (the cpu accumulates in the dtype in a fixed tree,
 * ref in double), 1e-12 in f64. */
#define _GNU_SOURCE /* setenv, mkdtemp */
#include <stdatomic.h>
#include <dirent.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "common.h"

/* ---- Devices ------------------------------------------------------------------------------- */

static burnc_device_t *open_cpu(void)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    if (!dev)
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    return dev;
}

/* ---- Host data ------------------------------------------------------------------------------ */

static uint64_t rng = 0x243f6a8885a308d3u;

static uint64_t next_u64(void) /* splitmix64 */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1p-53; }

static void store(void *base, burnc_dtype_t dt, int64_t i, double v)
{
    switch (dt) {
    case BURNC_DTYPE_F32: ((float *)base)[i] = (float)v; break;
    case BURNC_DTYPE_F64: ((double *)base)[i] = v; break;
    case BURNC_DTYPE_F16: ((uint16_t *)base)[i] = burnc_f32_to_f16((float)v); break;
    case BURNC_DTYPE_BF16: ((uint16_t *)base)[i] = burnc_f32_to_bf16((float)v); break;
    case BURNC_DTYPE_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case BURNC_DTYPE_I64: ((int64_t *)base)[i] = (int64_t)v; break;
    case BURNC_DTYPE_U8: ((uint8_t *)base)[i] = (uint8_t)(int64_t)v; break;
    case BURNC_DTYPE_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    default: cr_assert_fail("bad dtype %d", dt);
    }
}

static bool is_float(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

/* A host tensor: shape and dense data. */
typedef struct host {
    burnc_dtype_t dt;
    int rank;
    int64_t shape[BURNC_MAX_RANK];
    int64_t n;
    void *data;
} host;

enum fill { GENERAL, POSITIVE, SPECIAL, SMALL_INT };

static host host_new(burnc_dtype_t dt, int rank, const int64_t *shape, enum fill kind)
{
    host h = {.dt = dt, .rank = rank, .n = 1};
    for (int d = 0; d < rank; d++) {
        h.shape[d] = shape[d];
        h.n *= shape[d];
    }
    h.data = calloc((size_t)(h.n ? h.n : 1), burnc_dtype_size(dt));
    cr_assert_not_null(h.data);
    static const double specials[] = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, INFINITY, -INFINITY, NAN, 1e-40, -3e-39,
                                      1e30, 65504, 3.0e38, 7.0, -7.0};
    for (int64_t i = 0; i < h.n; i++) {
        double v;
        if (!is_float(dt))
            v = kind == SMALL_INT ? (double)(int64_t)uniform(-9, 10) : (double)(int64_t)uniform(-200, 200);
        else if (kind == POSITIVE)
            v = uniform(0.01, 20);
        else if (kind == SPECIAL && i % 5 == 0)
            v = specials[(i / 5) % (sizeof specials / sizeof specials[0])];
        else
            v = uniform(-6, 6);
        if (dt == BURNC_DTYPE_U8)
            v = fabs(v);
        store(h.data, dt, i, v);
    }
    return h;
}

static void host_free(host *h) { free(h->data); }

/* ---- Comparing ------------------------------------------------------------------------------ */

typedef struct tol {
    int ulps;   /* allowed distance in units in the last place of the dtype */
    double rel; /* or |got - want| <= rel * max(1, |want|) */
    double abs; /* or |got - want| <= abs */
} tol;

static const tol EXACT = {0, 0, 0};

/* Ordered integer image of a float's bits: neighbours differ by 1. */
static int64_t ordered(const void *base, burnc_dtype_t dt, int64_t i)
{
    int64_t b;
    int64_t top;
    switch (dt) {
    case BURNC_DTYPE_F32: {
        uint32_t u;
        memcpy(&u, (const char *)base + 4 * i, 4);
        b = u;
        top = (int64_t)1 << 31;
        break;
    }
    case BURNC_DTYPE_F64: {
        uint64_t u;
        memcpy(&u, (const char *)base + 8 * i, 8);
        return (u >> 63) ? -(int64_t)(u & ~(1ull << 63)) : (int64_t)u;
    }
    default: {
        uint16_t u;
        memcpy(&u, (const char *)base + 2 * i, 2);
        b = u;
        top = 1 << 15;
        break;
    }
    }
    return b >= top ? -(b - top) : b;
}

static bool float_close(const void *got, const void *want, burnc_dtype_t dt, int64_t i, tol t)
{
    double g = bt_load(got, dt, i), w = bt_load(want, dt, i);
    if (isnan(g) || isnan(w))
        return isnan(g) && isnan(w);
    if (isinf(g) || isinf(w))
        return g == w;
    int64_t d = ordered(got, dt, i) - ordered(want, dt, i);
    if (d <= t.ulps && -d <= t.ulps)
        return true;
    return fabs(g - w) <= t.rel * fmax(1.0, fabs(w)) || fabs(g - w) <= t.abs;
}

static void expect_close(const char *what, burnc_dtype_t dt, const void *got, const void *want, int64_t n, tol t)
{
    size_t es = burnc_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        bool ok = is_float(dt) ? float_close(got, want, dt, i, t)
                               : memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0;
        cr_assert(ok, "%s (%s): element %lld: cpu %.17g, ref %.17g", what, burnc_dtype_name(dt), (long long)i,
                  bt_load(got, dt, i), bt_load(want, dt, i));
    }
}

/* ---- Running one op on ref and cpu ---------------------------------------------------------- */

typedef burnc_tensor_t *(*build_fn)(burnc_tensor_t *const *in, const void *arg);

typedef struct result {
    burnc_tensor_t *t; /* NULL when the op refused its inputs */
    burnc_status_t code;
    void *data;
} result;

static result run_on(burnc_device_t *dev, int n_in, const host *in, build_fn f, const void *arg)
{
    burnc_tensor_t *x[8];
    for (int k = 0; k < n_in; k++)
        x[k] = BT_NOT_NULL(burnc_tensor_from_data(dev, in[k].dt, in[k].rank, in[k].shape, in[k].data));
    burnc_error_clear();
    burnc_scope_begin();
    result r = {.t = burnc_tensor_keep(f(x, arg))};
    burnc_scope_end();
    r.code = burnc_error_code();
    for (int k = 0; k < n_in; k++)
        burnc_tensor_release(x[k]);
    if (r.t) {
        size_t bytes = (size_t)burnc_tensor_numel(r.t) * burnc_dtype_size(burnc_tensor_dtype(r.t));
        r.data = malloc(bytes ? bytes : 1);
        BT_ASSERT_OK(burnc_tensor_read(r.t, r.data, bytes));
    }
    return r;
}

/* Runs f on both devices with the same inputs; the results agree within t (or both refuse). */
static void check_op(burnc_device_t *ref, burnc_device_t *cpu, const char *what, int n_in, const host *in,
                     build_fn f, const void *arg, tol t)
{
    result want = run_on(ref, n_in, in, f, arg);
    result got = run_on(cpu, n_in, in, f, arg);
    cr_assert_eq(got.t == NULL, want.t == NULL, "%s: ref %s, cpu %s", what, want.t ? "ran" : "refused",
                 got.t ? "ran" : "refused");
    cr_assert_eq(got.code, want.code, "%s: ref status %s, cpu %s", what, burnc_status_name(want.code),
                 burnc_status_name(got.code));
    if (want.t) {
        burnc_dtype_t dt = burnc_tensor_dtype(want.t);
        cr_assert_eq(burnc_tensor_dtype(got.t), dt, "%s: dtype", what);
        cr_assert_eq(burnc_tensor_rank(got.t), burnc_tensor_rank(want.t), "%s: rank", what);
        for (int d = 0; d < burnc_tensor_rank(want.t); d++)
            cr_assert_eq(burnc_tensor_shape(got.t)[d], burnc_tensor_shape(want.t)[d], "%s: shape", what);
        expect_close(what, dt, got.data, want.data, burnc_tensor_numel(want.t), t);
    }
    burnc_tensor_release(got.t);
    burnc_tensor_release(want.t);
    free(got.data);
    free(want.data);
}

static const burnc_dtype_t FLOATS[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
static const burnc_dtype_t ALL[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                    BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8, BURNC_DTYPE_BOOL};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* One math function against ref: the kernel math is faithful (<= 1 ulp, include/burnc.h) and
 * ref rounds the exact value once, so 2 ulps (f16/bf16 round an f32 result once more, which
 * stays within that). A composition whose intermediate is subnormal (silu's sigmoid at
 * x = -100) loses relative precision there: up to 256 of the smallest subnormal absolute. */
static tol math_tol(burnc_dtype_t dt)
{
    return (tol){2, 0, dt == BURNC_DTYPE_F64 ? 0x1p-1066 : 0x1p-141};
}

static tol reduce_tol(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F32: return (tol){1, 1e-5, 0};
    case BURNC_DTYPE_F64: return (tol){1, 1e-12, 0};
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return (tol){1, 0, 0};
    default: return EXACT;
    }
}

/* ---- Opening -------------------------------------------------------------------------------- */

Test(cpu, opens_and_is_listed)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    cr_assert_not_null(dev, "cpu does not open: %s", burnc_error_message());
    cr_assert_eq(burnc_device_type(dev), BURNC_DEVICE_CPU);
    const char *name = burnc_device_name(dev);
    cr_assert(name && strstr(name, "core"), "name \"%s\" does not give the core count", name ? name : "");
    burnc_device_info_t info[8];
    int n = burnc_device_enumerate(BURNC_DEVICE_CPU, info, 8);
    cr_assert_eq(n, 1, "enumerate(CPU) gave %d devices", n);
    cr_assert_eq(info[0].type, BURNC_DEVICE_CPU);
    cr_assert_str_eq(info[0].spec, "cpu");
    cr_assert_str_eq(info[0].name, name);
    burnc_device_t *again = BT_NOT_NULL(burnc_device_open(info[0].spec));
    cr_assert(burnc_device_equal(dev, again));
    burnc_device_release(again);
    /* the host is one device */
    BT_ASSERT_FAILS(burnc_device_open("cpu:1"), BURNC_ERR_UNAVAILABLE, "cpu");
    for (int i = 0; i < COUNT(ALL); i++)
        cr_assert(burnc_device_supports_dtype(dev, ALL[i]), "%s", burnc_dtype_name(ALL[i]));
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Every op family against ref ------------------------------------------------------------ */

typedef burnc_tensor_t *(*unary_fn)(burnc_tensor_t *);
typedef burnc_tensor_t *(*binary_fn)(burnc_tensor_t *, burnc_tensor_t *);
typedef burnc_tensor_t *(*binary_scalar_fn)(burnc_tensor_t *, double);

static burnc_tensor_t *apply_unary(burnc_tensor_t *const *x, const void *arg)
{
    return (*(const unary_fn *)arg)(x[0]);
}

/* ulps against ref: 0 for exact ops; 2 for one math function (see math_tol); 4 for
 * compositions (gelu, silu and rsqrt add their own roundings). */
static const struct {
    const char *name;
    unary_fn fn;
    int ulps;
} UNARY[] = {
#define U(n, e) {#n, burnc_##n, e},
    U(neg, 0) U(abs, 0) U(sign, 0) U(exp, 2) U(exp2, 2) U(expm1, 2) U(log, 2) U(log2, 2) U(log1p, 2) U(sqrt, 0)
    U(rsqrt, 4) U(reciprocal, 0) U(sin, 2) U(cos, 2) U(tan, 2) U(tanh, 2) U(sigmoid, 2) U(relu, 0) U(gelu, 4)
    U(silu, 4) U(erf, 2) U(floor, 0) U(ceil, 0) U(round, 0) U(logical_not, 0)
#undef U
};

static bool is_trig(unary_fn fn) { return fn == burnc_sin || fn == burnc_cos || fn == burnc_tan; }

/* sin, cos and tan reduce their argument accurately for |x| < 2^17 in f32 and 2^36 in f64
 * (include/burnc.h): larger values are checked by trig_beyond_the_accurate_range. */
static host within_trig_range(const host *x)
{
    host y = *x;
    size_t bytes = (size_t)x->n * burnc_dtype_size(x->dt);
    y.data = malloc(bytes ? bytes : 1);
    memcpy(y.data, x->data, bytes);
    double limit = x->dt == BURNC_DTYPE_F64 ? 0x1p36 : 0x1p17;
    for (int64_t i = 0; is_float(x->dt) && i < x->n; i++) {
        double v = bt_load(y.data, y.dt, i);
        if (isfinite(v) && fabs(v) >= limit)
            store(y.data, y.dt, i, copysign(100000.5, v));
    }
    return y;
}

Test(cpu, unary_ops)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t shape[2] = {7, 33};
    for (int d = 0; d < COUNT(ALL); d++) {
        host x = host_new(ALL[d], 2, shape, SPECIAL);
        host xt = within_trig_range(&x);
        for (int o = 0; o < COUNT(UNARY); o++) {
            char what[64];
            snprintf(what, sizeof what, "%s", UNARY[o].name);
            /* float math on integers computes in f32: the f32 bound */
            burnc_dtype_t cdt = is_float(ALL[d]) ? ALL[d] : BURNC_DTYPE_F32;
            tol t = UNARY[o].ulps ? math_tol(cdt) : EXACT;
            t.ulps = UNARY[o].ulps;
            check_op(ref, cpu, what, 1, is_trig(UNARY[o].fn) ? &xt : &x, apply_unary, &UNARY[o].fn, t);
        }
        host_free(&xt);
        host_free(&x);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

/* Beyond the accurate range sin and cos stay in [-1, 1] and tan is a number. */
Test(cpu, trig_beyond_the_accurate_range)
{
    burnc_device_t *cpu = open_cpu();
    const double big[6] = {1e30, -3e38, 1e20, 0x1p40, 7e300, -1e100};
    const int64_t s[1] = {6};
    for (int d = 0; d < 2; d++) {
        host x = {.dt = FLOATS[d], .rank = 1, .shape = {6}, .n = 6, .data = calloc(6, 8)};
        for (int i = 0; i < 6; i++)
            store(x.data, x.dt, i, d == 0 && fabs(big[i]) > 3e38 ? copysign(3e38, big[i]) : big[i]);
        burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(cpu, x.dt, 1, s, x.data));
        for (int f = 0; f < 3; f++) {
            burnc_tensor_t *y = BT_NOT_NULL(f == 0 ? burnc_sin(t) : f == 1 ? burnc_cos(t) : burnc_tan(t));
            double v[6];
            BT_ASSERT_OK(burnc_tensor_read(y, v, 6 * burnc_dtype_size(x.dt)));
            for (int i = 0; i < 6; i++) {
                double r = bt_load(v, x.dt, i);
                cr_assert(!isnan(r) && (f == 2 || fabs(r) <= 1.0), "%s(%g) = %g", f == 0 ? "sin" : f == 1 ? "cos" : "tan",
                          bt_load(x.data, x.dt, i), r);
            }
            burnc_tensor_release(y);
        }
        burnc_tensor_release(t);
        host_free(&x);
    }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_clamp(burnc_tensor_t *const *x, const void *arg)
{
    const double *lh = arg;
    return burnc_clamp(x[0], lh[0], lh[1]);
}

static burnc_tensor_t *apply_cast(burnc_tensor_t *const *x, const void *arg)
{
    return burnc_cast(x[0], *(const burnc_dtype_t *)arg);
}

Test(cpu, clamp_and_cast)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t shape[1] = {97};
    for (int d = 0; d < COUNT(ALL); d++) {
        host x = host_new(ALL[d], 1, shape, SPECIAL);
        const double bounds[3][2] = {{-1.5, 2.25}, {0, INFINITY}, {3, -3}};
        for (int b = 0; b < 3; b++)
            check_op(ref, cpu, "clamp", 1, &x, apply_clamp, bounds[b], EXACT);
        for (int to = 0; to < COUNT(ALL); to++)
            check_op(ref, cpu, "cast", 1, &x, apply_cast, &ALL[to], EXACT);
        host_free(&x);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static const struct {
    const char *name;
    binary_fn fn;
    binary_scalar_fn scalar;
    bool exact; /* else one math function: 2 ulps (see UNARY) */
} BINARY[] = {
#define B(n, e) {#n, burnc_##n, burnc_##n##_scalar, e},
    B(add, true) B(sub, true) B(mul, true) B(div, true) B(pow, false) B(maximum, true) B(minimum, true)
    B(remainder, true) B(atan2, false) B(eq, true) B(ne, true) B(lt, true) B(le, true) B(gt, true) B(ge, true)
    B(logical_and, true) B(logical_or, true) B(logical_xor, true)
#undef B
};

static burnc_tensor_t *apply_binary(burnc_tensor_t *const *x, const void *arg)
{
    return BINARY[*(const int *)arg].fn(x[0], x[1]);
}

static burnc_tensor_t *apply_binary_scalar(burnc_tensor_t *const *x, const void *arg)
{
    return BINARY[*(const int *)arg].scalar(x[0], -2.75);
}

Test(cpu, binary_ops)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t sa[3] = {5, 1, 7}, sb[2] = {4, 7}; /* broadcast to [5, 4, 7] */
    for (int d = 0; d < COUNT(ALL); d++) {
        /* same dtype, and mixed with the next dtype (promotion) */
        for (int mix = 0; mix < 2; mix++) {
            burnc_dtype_t db = mix ? ALL[(d + 1) % COUNT(ALL)] : ALL[d];
            host in[2] = {host_new(ALL[d], 3, sa, SPECIAL), host_new(db, 2, sb, mix ? GENERAL : SMALL_INT)};
            for (int o = 0; o < COUNT(BINARY); o++) {
                char what[64];
                snprintf(what, sizeof what, "%s %s,%s", BINARY[o].name, burnc_dtype_name(ALL[d]),
                         burnc_dtype_name(db));
                tol t = BINARY[o].exact ? EXACT : math_tol(ALL[d]);
                check_op(ref, cpu, what, 2, in, apply_binary, &o, t);
                if (!mix)
                    check_op(ref, cpu, what, 1, in, apply_binary_scalar, &o, t);
            }
            host_free(&in[0]);
            host_free(&in[1]);
        }
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_where(burnc_tensor_t *const *x, const void *arg)
{
    (void)arg;
    return burnc_where(x[0], x[1], x[2]);
}

Test(cpu, where)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t sc[2] = {3, 1}, sa[2] = {3, 4}, sb[1] = {4};
    for (int d = 0; d < COUNT(ALL); d++) {
        host in[3] = {host_new(BURNC_DTYPE_BOOL, 2, sc, GENERAL), host_new(ALL[d], 2, sa, SPECIAL),
                      host_new(BURNC_DTYPE_F64, 1, sb, GENERAL)};
        check_op(ref, cpu, "where", 3, in, apply_where, NULL, EXACT);
        for (int k = 0; k < 3; k++)
            host_free(&in[k]);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

typedef struct reduce_arg {
    int op; /* index into REDUCE */
    int naxes;
    int axes[3];
    bool keepdim;
} reduce_arg;

static const char *const REDUCE[] = {"sum", "mean", "prod", "max", "min", "var", "std", "argmax", "argmin"};

static burnc_tensor_t *apply_reduce(burnc_tensor_t *const *x, const void *arg)
{
    const reduce_arg *r = arg;
    switch (r->op) {
    case 0: return burnc_sum(x[0], r->naxes, r->axes, r->keepdim);
    case 1: return burnc_mean(x[0], r->naxes, r->axes, r->keepdim);
    case 2: return burnc_prod(x[0], r->naxes, r->axes, r->keepdim);
    case 3: return burnc_max(x[0], r->naxes, r->axes, r->keepdim);
    case 4: return burnc_min(x[0], r->naxes, r->axes, r->keepdim);
    case 5: return burnc_var(x[0], r->naxes, r->axes, 1.0, r->keepdim);
    case 6: return burnc_std(x[0], r->naxes, r->axes, 0.0, r->keepdim);
    case 7: return burnc_argmax(x[0], r->axes[0], r->keepdim);
    default: return burnc_argmin(x[0], r->axes[0], r->keepdim);
    }
}

/* Reductions over several shapes: many short rows, few long ones (split by leaves), all axes. */
static void check_reductions(burnc_device_t *ref, burnc_device_t *cpu, burnc_dtype_t dt, int rank,
                             const int64_t *shape, const reduce_arg *axes_list, int n_axes_list)
{
    host x = host_new(dt, rank, shape, dt == BURNC_DTYPE_F32 ? GENERAL : SMALL_INT);
    if (is_float(dt)) /* prod of thousands of values: keep it finite and informative */
        for (int64_t i = 0; i < x.n; i++)
            store(x.data, dt, i, uniform(0.999, 1.001) * (i % 7 == 0 ? -1 : 1));
    for (int a = 0; a < n_axes_list; a++)
        for (int op = 0; op < COUNT(REDUCE); op++) {
            reduce_arg r = axes_list[a];
            r.op = op;
            char what[64];
            snprintf(what, sizeof what, "%s over %d axes", REDUCE[op], r.naxes);
            tol t = op >= 3 && op != 5 && op != 6 ? EXACT : reduce_tol(dt);
            if (op == 2) { /* a product's rounding errors add up: n roundings of the dtype */
                double count = 1;
                for (int d = 0; d < rank; d++) {
                    bool reduced = r.naxes == 0;
                    for (int i = 0; i < r.naxes; i++)
                        reduced |= (r.axes[i] + rank) % rank == d;
                    count *= reduced ? (double)shape[d] : 1.0;
                }
                double eps = dt == BURNC_DTYPE_F64 ? 0x1p-53 : 0x1p-24;
                t.rel = fmax(t.rel, count * eps);
            }
            check_op(ref, cpu, what, 1, &x, apply_reduce, &r, t);
        }
    host_free(&x);
}

Test(cpu, reductions)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const reduce_arg small_axes[] = {{.naxes = 0}, {.naxes = 1, .axes = {0}}, {.naxes = 1, .axes = {-1}, .keepdim = true},
                                     {.naxes = 2, .axes = {0, 2}}, {.naxes = 1, .axes = {1}}};
    const int64_t small[3] = {3, 5, 70};
    for (int d = 0; d < COUNT(ALL) - 1; d++) /* bool: sum/prod only, covered by the cast tests */
        check_reductions(ref, cpu, ALL[d], 3, small, small_axes, COUNT(small_axes));
    const reduce_arg long_axes[] = {{.naxes = 1, .axes = {1}}, {.naxes = 0}};
    const int64_t few_long[2] = {3, 50000}, one_long[2] = {1, 1 << 17};
    check_reductions(ref, cpu, BURNC_DTYPE_F32, 2, few_long, long_axes, COUNT(long_axes));
    check_reductions(ref, cpu, BURNC_DTYPE_F64, 2, one_long, long_axes, 1);
    check_reductions(ref, cpu, BURNC_DTYPE_I32, 2, few_long, long_axes, 1);
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_composite(burnc_tensor_t *const *x, const void *arg)
{
    switch (*(const int *)arg) {
    case 0: return burnc_softmax(x[0], -1);
    case 1: return burnc_softmax(x[0], 0);
    case 2: return burnc_log_softmax(x[0], 1);
    case 3: return burnc_layer_norm(x[0], 1, 1e-5);
    default: return burnc_layer_norm_affine(x[0], 1, x[1], x[2], 1e-5);
    }
}

Test(cpu, composites)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t shape[2] = {6, 300}, row[1] = {300};
    for (int d = 0; d < 2; d++) {
        burnc_dtype_t dt = FLOATS[d];
        host in[3] = {host_new(dt, 2, shape, GENERAL), host_new(dt, 1, row, GENERAL), host_new(dt, 1, row, GENERAL)};
        for (int c = 0; c < 5; c++)
            check_op(ref, cpu, "softmax/log_softmax/layer_norm", 3, in, apply_composite, &c,
                     (tol){4, dt == BURNC_DTYPE_F32 ? 1e-5 : 1e-12, 0});
        for (int k = 0; k < 3; k++)
            host_free(&in[k]);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_matmul(burnc_tensor_t *const *x, const void *arg)
{
    (void)arg;
    return burnc_matmul(x[0], x[1]);
}

Test(cpu, matmul)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t shapes[][2][3] = {{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{4}, {4, 5}}, {{3, 4}, {4}}};
    const int ranks[][2] = {{2, 2}, {3, 2}, {1, 2}, {2, 1}};
    const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_BF16, BURNC_DTYPE_I32};
    for (int d = 0; d < COUNT(dts); d++)
        for (int s = 0; s < 4; s++) {
            host in[2] = {host_new(dts[d], ranks[s][0], shapes[s][0], SMALL_INT),
                          host_new(dts[d], ranks[s][1], shapes[s][1], GENERAL)};
            check_op(ref, cpu, "matmul", 2, in, apply_matmul, NULL, reduce_tol(dts[d]));
            host_free(&in[0]);
            host_free(&in[1]);
        }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_movement(burnc_tensor_t *const *x, const void *arg)
{
    burnc_tensor_t *y = x[0]; /* [4, 6, 5] */
    switch (*(const int *)arg) {
    case 0: return burnc_contiguous(burnc_permute(y, 3, (const int[]){2, 0, 1}));
    case 1: return burnc_contiguous(burnc_slice(y, 1, 5, 0, -2));
    case 2: return burnc_contiguous(burnc_flip(y, 2, (const int[]){0, 2}));
    case 3: return burnc_contiguous(burnc_expand(burnc_slice(y, 0, 0, 1, 1), 3, (const int64_t[]){3, 6, 5}));
    case 4: return burnc_cat(3, (burnc_tensor_t *const[]){y, burnc_neg(y), y}, 1);
    case 5: return burnc_stack(2, (burnc_tensor_t *const[]){y, burnc_exp(y)}, -1);
    case 6: return burnc_pad(y, (const int64_t[]){1, 0, -2, 3, 2, 2}, -1.5);
    default: return burnc_reshape(burnc_transpose(y, 0, 2), 2, (const int64_t[]){10, 12});
    }
}

Test(cpu, movement)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t shape[3] = {4, 6, 5};
    for (int d = 0; d < COUNT(ALL); d++) {
        host x = host_new(ALL[d], 3, shape, SPECIAL);
        for (int c = 0; c < 8; c++)
            check_op(ref, cpu, "movement", 1, &x, apply_movement, &c,
                     c == 5 ? math_tol(is_float(ALL[d]) ? ALL[d] : BURNC_DTYPE_F32) : EXACT);
        host_free(&x);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_index(burnc_tensor_t *const *x, const void *arg)
{
    /* x[0] data [5, 4]; x[1] idx [3] (i64, in 0..4); x[2] idx [5, 4] for gather/scatter (0..4);
     * x[3] src [5, 4] */
    switch (*(const int *)arg) {
    case 0: return burnc_index_select(x[0], 0, x[1]);
    case 1: return burnc_index_select(x[0], 1, burnc_cast(burnc_remainder_scalar(x[1], 4), BURNC_DTYPE_I32));
    case 2: return burnc_gather(x[0], 1, burnc_remainder_scalar(x[2], 4));
    case 3: return burnc_scatter_add(x[0], 0, x[2], x[3]);
    case 4: return burnc_index_add(x[0], 0, x[1], burnc_slice(x[3], 0, 0, 3, 1));
    default: return burnc_slice_assign(x[0], 0, 4, 0, -2, burnc_slice(x[3], 0, 0, 2, 1));
    }
}

Test(cpu, index_ops)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t s54[2] = {5, 4}, s3[1] = {3};
    for (int d = 0; d < COUNT(ALL) - 1; d++) {
        host in[4] = {host_new(ALL[d], 2, s54, GENERAL), host_new(BURNC_DTYPE_I64, 1, s3, SMALL_INT),
                      host_new(BURNC_DTYPE_I64, 2, s54, SMALL_INT), host_new(ALL[d], 2, s54, SMALL_INT)};
        int64_t dup[3] = {4, 0, 4}; /* duplicates accumulate in order */
        memcpy(in[1].data, dup, sizeof dup);
        for (int64_t i = 0; i < in[2].n; i++)
            ((int64_t *)in[2].data)[i] = (i * 7 + 3) % 5;
        for (int c = 0; c < 6; c++)
            check_op(ref, cpu, "index", 4, in, apply_index, &c, EXACT);
        for (int k = 0; k < 4; k++)
            host_free(&in[k]);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

static burnc_tensor_t *apply_source(burnc_tensor_t *const *x, const void *arg)
{
    burnc_device_t *dev = burnc_tensor_device(x[0]);
    burnc_dtype_t dt = burnc_tensor_dtype(x[0]);
    const int64_t shape[2] = {9, 13};
    burnc_tensor_t *y = NULL;
    burnc_device_seed(dev, 1234);
    switch (*(const int *)arg) {
    case 0: y = burnc_full(dev, dt, 2, shape, -3.3); break;
    case 1: y = burnc_arange(dev, dt, -5, 40, 0.75); break;
    case 2: y = burnc_eye(dev, dt, 5, 7); break;
    case 3: y = burnc_rand(dev, dt, 2, shape); break;
    default: y = burnc_randn(dev, dt, 2, shape); break;
    }
    burnc_device_release(dev);
    return y;
}

Test(cpu, sources)
{
    burnc_device_t *ref = bt_ref(), *cpu = open_cpu();
    const int64_t one[1] = {1};
    for (int d = 0; d < COUNT(ALL); d++) {
        host x = host_new(ALL[d], 1, one, GENERAL); /* carries the dtype and device */
        for (int c = 0; c < 5; c++)
            check_op(ref, cpu, "source", 1, &x, apply_source, &c,
                     c == 4 ? (tol){4, 0, 0} : EXACT); /* randn: log, sqrt, cos and a product */
        host_free(&x);
    }
    burnc_device_release(cpu);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}

/* ---- The queue ------------------------------------------------------------------------------ */

/* Thousands of launches queued one flush at a time; the value is exact in f32. */
Test(cpu, many_queued_ops)
{
    burnc_device_t *cpu = open_cpu();
    enum { N = 4096, STEPS = 3000 };
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(cpu, BURNC_DTYPE_F32, 0, N, 1));
    for (int s = 0; s < STEPS; s++) {
        burnc_tensor_t *y = BT_NOT_NULL(s % 2 ? burnc_add_scalar(x, 1.0) : burnc_mul_scalar(x, 1.0));
        burnc_tensor_release(x);
        x = y;
        if (s % 3 == 0)
            BT_ASSERT_OK(burnc_device_flush(cpu));
    }
    float *v = malloc(N * sizeof *v);
    bt_read_f32(x, v, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(v[i], (float)(i + STEPS / 2), "element %d: %g", i, (double)v[i]);
    free(v);
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_tensor_release(x);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

enum { NTHREADS = 4, THREAD_N = 3000, THREAD_ROUNDS = 40 };

typedef struct thread_job {
    burnc_device_t *dev;
    int id, failures;
    char why[256];
} thread_job;

static int thread_main(void *arg)
{
    thread_job *j = arg;
    for (int round = 0; round < THREAD_ROUNDS; round++) {
        burnc_scope_begin();
        burnc_tensor_t *x = burnc_arange(j->dev, BURNC_DTYPE_F32, 0, THREAD_N, 1);
        burnc_tensor_t *y = burnc_add_scalar(burnc_mul_scalar(x, (double)j->id), (double)round);
        burnc_tensor_t *s = burnc_sum(y, 0, NULL, false);
        float v[THREAD_N], total = 0;
        burnc_status_t st = y && s ? burnc_tensor_read(y, v, sizeof v) : burnc_error_code();
        if (st == BURNC_OK)
            st = burnc_tensor_read(s, &total, sizeof total);
        burnc_scope_end();
        if (st != BURNC_OK) {
            j->failures++;
            snprintf(j->why, sizeof j->why, "%s", burnc_error_message());
            continue;
        }
        double want_total = 0;
        for (int i = 0; i < THREAD_N; i++) {
            float want = (float)i * (float)j->id + (float)round;
            want_total += want;
            if (v[i] != want) {
                j->failures++;
                snprintf(j->why, sizeof j->why, "round %d element %d: %g, expected %g", round, i, (double)v[i],
                         (double)want);
                break;
            }
        }
        if (fabs(total - want_total) > 1e-5 * want_total) {
            j->failures++;
            snprintf(j->why, sizeof j->why, "round %d sum %g, expected %g", round, (double)total, want_total);
        }
    }
    return 0;
}

Test(cpu, several_threads)
{
    burnc_device_t *cpu = open_cpu();
    thread_job jobs[NTHREADS];
    thrd_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (thread_job){.dev = cpu, .id = i + 1};
        cr_assert_eq(thrd_create(&th[i], thread_main, &jobs[i]), thrd_success);
    }
    for (int i = 0; i < NTHREADS; i++)
        thrd_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++)
        cr_assert_eq(jobs[i].failures, 0, "thread %d: %d failures; last: %s", i, jobs[i].failures, jobs[i].why);
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* A gather with an index out of range fails on the worker: sync and reads report it, what is
 * computed from it is poisoned, and the device goes on working. */
Test(cpu, sync_reports_execution_error)
{
    burnc_device_t *cpu = open_cpu();
    const int64_t s[2] = {2, 3};
    const float data[6] = {1, 2, 3, 4, 5, 6};
    const int64_t bad[6] = {0, 1, 2, 0, 7, 1};
    burnc_tensor_t *x = bt_f32(cpu, 2, s, data);
    burnc_tensor_t *idx = BT_NOT_NULL(burnc_tensor_from_data(cpu, BURNC_DTYPE_I64, 2, s, bad));
    burnc_tensor_t *g = BT_NOT_NULL(burnc_gather(x, 1, idx));
    burnc_tensor_t *after = BT_NOT_NULL(burnc_exp(g));
    burnc_tensor_t *fine = BT_NOT_NULL(burnc_add_scalar(x, 1.0));
    BT_ASSERT_OK(burnc_device_flush(cpu)); /* queued: the failure is not known yet */
    BT_ASSERT_STATUS(burnc_device_sync(cpu), BURNC_ERR_INDEX, "7");
    BT_ASSERT_OK(burnc_device_sync(cpu)); /* reported once */
    float v[6];
    BT_ASSERT_STATUS(burnc_tensor_read(g, v, sizeof v), BURNC_ERR_INDEX, "7");
    BT_ASSERT_STATUS(burnc_tensor_read(after, v, sizeof v), BURNC_ERR_INDEX, "7");
    bt_expect_f32(fine, 6, (const float[]){2, 3, 4, 5, 6, 7}, 0);
    /* a failure inside an implicit flush (a read of something else) is kept for sync */
    burnc_tensor_t *g2 = BT_NOT_NULL(burnc_gather(x, 1, idx));
    burnc_tensor_t *ok2 = BT_NOT_NULL(burnc_mul_scalar(x, 2.0));
    bt_expect_f32(ok2, 6, (const float[]){2, 4, 6, 8, 10, 12}, 0);
    BT_ASSERT_STATUS(burnc_device_sync(cpu), BURNC_ERR_INDEX, "gather");
    bt_expect_usable(cpu);
    burnc_tensor_release(ok2);
    burnc_tensor_release(g2);
    burnc_tensor_release(fine);
    burnc_tensor_release(after);
    burnc_tensor_release(g);
    burnc_tensor_release(idx);
    burnc_tensor_release(x);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Host writes into a pooled buffer wait for the queued work that still reads it. */
Test(cpu, host_write_waits_for_queued_readers)
{
    burnc_device_t *cpu = open_cpu();
    enum { N = 1 << 20 };
    const int64_t shape[1] = {N};
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *v = malloc(N * sizeof *v);
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < N; i++) {
            a[i] = (float)(i % 1000);
            b[i] = -1.0f;
        }
        burnc_tensor_t *x = bt_f32(cpu, 1, shape, a);
        burnc_scope_begin();
        burnc_tensor_t *y = x;
        for (int k = 0; k < 4; k++) /* x*x and its root are exact for these values */
            y = BT_NOT_NULL(burnc_sqrt(burnc_mul(y, y)));
        burnc_tensor_keep(y);
        burnc_scope_end();
        BT_ASSERT_OK(burnc_device_flush(cpu));
        burnc_tensor_release(x); /* its buffer goes back to the pool while queued work reads it */
        burnc_tensor_t *z = bt_f32(cpu, 1, shape, b); /* most likely gets that buffer */
        bt_read_f32(y, v, N);
        for (int i = 0; i < N; i++)
            cr_assert_eq(v[i], a[i], "round %d element %d: %g, expected %g", round, i, (double)v[i], (double)a[i]);
        burnc_tensor_release(z);
        burnc_tensor_release(y);
    }
    free(a);
    free(b);
    free(v);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

typedef struct wrapped {
    float *data;
    int64_t n;
    atomic_int released;
} wrapped;

/* Scribbles over the memory: a job still reading it would compute garbage. */
static void release_wrapped(void *user)
{
    wrapped *w = user;
    for (int64_t i = 0; i < w->n; i++)
        w->data[i] = NAN;
    atomic_fetch_add(&w->released, 1);
}

/* Caller memory is released only after the queued work that reads it. */
Test(cpu, wrap_released_after_queued_work)
{
    burnc_device_t *cpu = open_cpu();
    enum { N = 1 << 20 };
    const int64_t shape[1] = {N};
    wrapped w = {.data = malloc(N * sizeof(float)), .n = N};
    for (int i = 0; i < N; i++)
        w.data[i] = (float)(i % 333);
    burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_wrap(cpu, BURNC_DTYPE_F32, 1, shape, w.data, release_wrapped, &w));
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(burnc_abs(burnc_neg(x))));
    burnc_scope_end();
    BT_ASSERT_OK(burnc_device_flush(cpu));
    burnc_tensor_release(x);
    cr_assert_eq(atomic_load(&w.released), 1, "the release callback ran %d times", atomic_load(&w.released));
    float *v = malloc(N * sizeof *v);
    bt_read_f32(y, v, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(v[i], (float)(i % 333), "element %d: %g", i, (double)v[i]);
    free(v);
    free(w.data);
    burnc_tensor_release(y);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* memory_cleanup with queued work that uses cached buffers, and closing the device with work
 * still queued (ASan sees any buffer freed under a job). */
Test(cpu, cleanup_and_close_with_queued_work)
{
    burnc_device_t *cpu = open_cpu();
    enum { N = 1 << 19 };
    burnc_tensor_t *x = BT_NOT_NULL(burnc_rand(cpu, BURNC_DTYPE_F32, 1, (const int64_t[]){N}));
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(burnc_sum(burnc_exp(burnc_neg(x)), 0, NULL, false)));
    burnc_scope_end();
    burnc_tensor_release(x);
    BT_ASSERT_OK(burnc_device_flush(cpu));
    BT_ASSERT_OK(burnc_device_memory_cleanup(cpu));
    float s = 0;
    BT_ASSERT_OK(burnc_tensor_read(y, &s, sizeof s));
    cr_assert(s > 0.5f * N * 0.36f && s < N, "sum %g", (double)s);
    /* queued work and no handles left: the device closes after it */
    burnc_tensor_t *z = BT_NOT_NULL(burnc_exp(y));
    BT_ASSERT_OK(burnc_device_flush(cpu));
    burnc_tensor_release(z);
    burnc_tensor_release(y);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- Fused against eager -------------------------------------------------------------------- */

/* An element-wise chain with broadcasts, views, scalars and transcendental functions. */
static burnc_tensor_t *chain(burnc_tensor_t *x, burnc_tensor_t *w)
{
    burnc_tensor_t *t = burnc_add_scalar(burnc_mul(x, w), 0.25);
    t = burnc_mul(burnc_gelu(t), burnc_sigmoid(burnc_transpose(w, 0, 1)));
    t = burnc_where(burnc_gt_scalar(x, 0.0), burnc_exp(burnc_neg(burnc_abs(t))), burnc_tanh(t));
    t = burnc_div(burnc_sub(t, burnc_sqrt(burnc_abs(x))), burnc_add_scalar(burnc_exp2(burnc_sin(x)), 1.0));
    return burnc_clamp(burnc_add(t, burnc_log1p(burnc_abs(burnc_erf(x)))), -3.0, 3.0);
}

static void *run_chain(burnc_device_t *dev, burnc_dtype_t dt, const host *x, const host *w, size_t *bytes)
{
    burnc_tensor_t *tx = BT_NOT_NULL(burnc_tensor_from_data(dev, dt, x->rank, x->shape, x->data));
    burnc_tensor_t *tw = BT_NOT_NULL(burnc_tensor_from_data(dev, dt, w->rank, w->shape, w->data));
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(chain(tx, tw)));
    burnc_scope_end();
    *bytes = (size_t)burnc_tensor_numel(y) * burnc_dtype_size(dt);
    void *out = malloc(*bytes);
    BT_ASSERT_OK(burnc_tensor_read(y, out, *bytes));
    burnc_tensor_release(y);
    burnc_tensor_release(tw);
    burnc_tensor_release(tx);
    return out;
}

Test(cpu, fused_equals_eager_bitwise)
{
    burnc_device_t *cpu = open_cpu();
    const int64_t sx[2] = {37, 37}, sw[2] = {37, 1}; /* w broadcasts; its transpose too */
    for (int d = 0; d < COUNT(FLOATS); d++) {
        host x = host_new(FLOATS[d], 2, sx, SPECIAL), w = host_new(FLOATS[d], 2, sw, GENERAL);
        size_t nf, ne;
        BT_ASSERT_OK(burnc_device_set_fusion(cpu, true));
        void *fused = run_chain(cpu, FLOATS[d], &x, &w, &nf);
        BT_ASSERT_OK(burnc_device_set_fusion(cpu, false));
        void *eager = run_chain(cpu, FLOATS[d], &x, &w, &ne);
        cr_assert_eq(nf, ne);
        size_t es = burnc_dtype_size(FLOATS[d]);
        for (size_t i = 0; i < nf / es; i++)
            cr_assert(memcmp((char *)fused + i * es, (char *)eager + i * es, es) == 0 ||
                          (isnan(bt_load(fused, FLOATS[d], (int64_t)i)) && isnan(bt_load(eager, FLOATS[d], (int64_t)i))),
                      "%s element %zu: fused %.17g, eager %.17g", burnc_dtype_name(FLOATS[d]), i,
                      bt_load(fused, FLOATS[d], (int64_t)i), bt_load(eager, FLOATS[d], (int64_t)i));
        free(fused);
        free(eager);
        host_free(&x);
        host_free(&w);
    }
    BT_ASSERT_OK(burnc_device_set_fusion(cpu, true));
    BT_ASSERT_STATUS(burnc_device_set_fusion(NULL, true), BURNC_ERR_INVALID_ARGUMENT, "NULL");
    burnc_device_t *ref = bt_ref();
    BT_ASSERT_OK(burnc_device_set_fusion(ref, true)); /* accepted and ignored */
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- Thread-count independence -------------------------------------------------------------- */

static atomic_int threads_seen;

static void capture_threads(void *user, const char *topic, const char *msg)
{
    (void)user;
    const char *p = strcmp(topic, "runtime") == 0 ? strstr(msg, " threads") : NULL;
    if (p) {
        while (p > msg && p[-1] >= '0' && p[-1] <= '9')
            p--;
        atomic_store(&threads_seen, atoi(p));
    }
}

enum { RED_CASES = 7 };

/* Reductions whose order matters (f32 sums of many values), read as raw bytes. */
static void reduce_bytes(burnc_device_t *dev, unsigned char out[RED_CASES][4096], size_t sizes[RED_CASES])
{
    rng = 77;
    const int64_t few_long[2] = {3, 300001}, many[2] = {700, 1000}, flat[1] = {1 << 20};
    host a = host_new(BURNC_DTYPE_F32, 2, few_long, GENERAL), b = host_new(BURNC_DTYPE_F32, 2, many, GENERAL);
    host c = host_new(BURNC_DTYPE_F32, 1, flat, GENERAL);
    burnc_tensor_t *ta = BT_NOT_NULL(burnc_tensor_from_data(dev, a.dt, a.rank, a.shape, a.data));
    burnc_tensor_t *tb = BT_NOT_NULL(burnc_tensor_from_data(dev, b.dt, b.rank, b.shape, b.data));
    burnc_tensor_t *tc = BT_NOT_NULL(burnc_tensor_from_data(dev, c.dt, c.rank, c.shape, c.data));
    burnc_scope_begin();
    burnc_tensor_t *r[RED_CASES] = {
        burnc_sum(ta, 1, (const int[]){1}, false),
        burnc_sum(tb, 1, (const int[]){1}, false),
        burnc_sum(tc, 0, NULL, false),
        burnc_mean(burnc_exp(ta), 1, (const int[]){1}, false),
        burnc_var(tc, 0, NULL, 1.0, false),
        burnc_argmax(ta, 1, false),
        burnc_sum(burnc_mul(tb, tb), 1, (const int[]){0}, false),
    };
    for (int i = 0; i < RED_CASES; i++) {
        BT_NOT_NULL(r[i]);
        sizes[i] = (size_t)burnc_tensor_numel(r[i]) * burnc_dtype_size(burnc_tensor_dtype(r[i]));
        cr_assert(sizes[i] <= 4096);
        BT_ASSERT_OK(burnc_tensor_read(r[i], out[i], sizes[i]));
    }
    burnc_scope_end();
    burnc_tensor_release(tc);
    burnc_tensor_release(tb);
    burnc_tensor_release(ta);
    host_free(&a);
    host_free(&b);
    host_free(&c);
}

Test(cpu, reductions_do_not_depend_on_thread_count)
{
    static unsigned char first[RED_CASES][4096], now[RED_CASES][4096];
    size_t sizes[RED_CASES], sizes_now[RED_CASES];
    const char *counts[] = {"1", "2", "3", "7", "16"};
    burnc_log_set_callback(capture_threads, NULL);
    for (int c = 0; c < COUNT(counts); c++) {
        setenv("BURNC_NUM_THREADS", counts[c], 1);
        atomic_store(&threads_seen, 0);
        burnc_device_t *cpu = open_cpu(); /* a fresh device: the last one closed */
        cr_assert_eq(atomic_load(&threads_seen), atoi(counts[c]), "BURNC_NUM_THREADS=%s gave %d threads",
                     counts[c], atomic_load(&threads_seen));
        reduce_bytes(cpu, c ? now : first, c ? sizes_now : sizes);
        burnc_device_release(cpu);
        for (int i = 0; c && i < RED_CASES; i++) {
            cr_assert_eq(sizes_now[i], sizes[i]);
            cr_assert(memcmp(now[i], first[i], sizes[i]) == 0, "case %d differs with %s threads", i, counts[c]);
        }
    }
    burnc_log_set_callback(NULL, NULL);
    unsetenv("BURNC_NUM_THREADS");
    BT_LEAK_CHECK();
}

/* Few long rows are split by leaves across threads, many rows by rows: the same row gives the
 * same bits either way (kernel.h's order). 17 rows take the row split, 16 of them the leaves. */
static burnc_tensor_t *row_reduce(burnc_tensor_t *x, int op)
{
    const int ax[1] = {1};
    switch (op) {
    case 0: return burnc_sum(x, 1, ax, false);
    case 1: return burnc_max(x, 1, ax, false);
    case 2: return burnc_argmax(x, 1, false);
    case 3: return burnc_argmin(burnc_neg(x), 1, false);
    case 4: return burnc_prod(burnc_add_scalar(burnc_mul_scalar(x, 1e-3), 1.0), 1, ax, false);
    default: return burnc_mean(burnc_exp(x), 1, ax, false);
    }
}

Test(cpu, leaf_split_equals_row_split)
{
    burnc_device_t *cpu = open_cpu();
    const int64_t shape[2] = {17, 20011};
    host h = host_new(BURNC_DTYPE_F32, 2, shape, GENERAL);
    ((float *)h.data)[5 * 20011 + 9000] = 100.0f; /* extremes in a later leaf, twice in one row */
    ((float *)h.data)[5 * 20011 + 15000] = 100.0f;
    ((float *)h.data)[7 * 20011 + 12345] = NAN;
    burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 2, shape, h.data));
    for (int op = 0; op < 6; op++) {
        burnc_scope_begin();
        burnc_tensor_t *all = BT_NOT_NULL(row_reduce(x, op));
        burnc_tensor_t *few = BT_NOT_NULL(row_reduce(burnc_slice(x, 0, 0, 16, 1), op));
        size_t es = burnc_dtype_size(burnc_tensor_dtype(all));
        unsigned char a[17 * 8], f[16 * 8];
        BT_ASSERT_OK(burnc_tensor_read(all, a, 17 * es));
        BT_ASSERT_OK(burnc_tensor_read(few, f, 16 * es));
        burnc_scope_end();
        for (int r = 0; r < 16; r++)
            cr_assert(memcmp(a + r * es, f + r * es, es) == 0, "op %d row %d: %s split %.9g, row split %.9g", op, r,
                      "leaf", bt_load(f, burnc_tensor_dtype(x) == BURNC_DTYPE_F32 && es == 4 ? BURNC_DTYPE_F32
                                                                                           : BURNC_DTYPE_I64, r),
                      bt_load(a, es == 4 ? BURNC_DTYPE_F32 : BURNC_DTYPE_I64, r));
        if (op == 2) {
            int64_t *pos = (int64_t *)(void *)f;
            cr_assert_eq(pos[5], 9000, "argmax keeps the first extreme: %lld", (long long)pos[5]);
            cr_assert_eq(pos[7], 12345, "argmax takes the NaN: %lld", (long long)pos[7]);
        }
    }
    burnc_tensor_release(x);
    host_free(&h);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- LLVM stays out of processes that compile nothing --------------------------------------- */

static bool llvm_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "libLLVM") != NULL;
    fclose(f);
    return found;
}

Test(cpu, no_llvm_without_compiling)
{
    cr_assert(!llvm_mapped(), "libLLVM is mapped at start");
    burnc_device_t *ref = bt_ref();
    bt_expect_usable(ref);
    burnc_device_release(ref);
    /* the cpu device opens, and runs opaque records (reference kernels), without LLVM */
    burnc_device_t *cpu = open_cpu();
    const int64_t s[2] = {2, 2};
    burnc_tensor_t *a = bt_f32(cpu, 2, s, (const float[]){1, 2, 3, 4});
    burnc_tensor_t *m = BT_NOT_NULL(burnc_matmul(a, a));
    bt_expect_f32(m, 4, (const float[]){7, 10, 15, 22}, 0);
    burnc_tensor_release(m);
    burnc_tensor_release(a);
    burnc_device_release(cpu);
    cr_assert(!llvm_mapped(), "libLLVM was loaded by work that compiles nothing");
    BT_LEAK_CHECK();
}

/* ---- Memory --------------------------------------------------------------------------------- */

Test(cpu, memory_report_and_cleanup)
{
    burnc_device_t *cpu = open_cpu();
    burnc_memory_report_t r0 = bt_memory(cpu);
    /* size classes waste at most 1/8 above 512 bytes */
    const int64_t sizes[] = {129, 1001, 4097, 100003, (1 << 20) + 1};
    for (int i = 0; i < COUNT(sizes); i++) {
        burnc_tensor_t *t = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_U8, 1, &sizes[i]));
        BT_ASSERT_OK(burnc_device_sync(cpu));
        burnc_memory_report_t r = bt_memory(cpu);
        uint64_t grew = r.bytes_in_use - r0.bytes_in_use;
        cr_assert(grew >= (uint64_t)sizes[i] && grew <= (uint64_t)sizes[i] + (uint64_t)sizes[i] / 8 + 64,
                  "%lld bytes took %llu", (long long)sizes[i], (unsigned long long)grew);
        burnc_tensor_release(t);
    }
    burnc_memory_report_t r1 = bt_memory(cpu);
    cr_assert_eq(r1.bytes_in_use, r0.bytes_in_use);
    cr_assert(r1.bytes_cached > 0, "nothing cached after releasing tensors");
    /* a buffer of the same class is reused */
    burnc_tensor_t *t = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_U8, 1, &sizes[2]));
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_memory_report_t r2 = bt_memory(cpu);
    cr_assert(r2.bytes_cached < r1.bytes_cached, "the cached buffer was not reused");
    burnc_tensor_release(t);
    BT_ASSERT_OK(burnc_device_memory_cleanup(cpu));
    burnc_memory_report_t r3 = bt_memory(cpu);
    cr_assert_eq(r3.bytes_cached, 0, "%llu bytes cached after cleanup", (unsigned long long)r3.bytes_cached);
    cr_assert_eq(r3.bytes_in_use, r0.bytes_in_use);
    cr_assert(r3.bytes_peak >= (uint64_t)sizes[4]);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Runs an element-wise chain in a fresh child process; its exit status says whether the result
 * was right (bit 0) and whether libLLVM got mapped (bit 1). */
static int chain_in_child(void)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int status = 0;
        burnc_device_t *cpu = burnc_device_open("cpu");
        burnc_tensor_t *x = cpu ? burnc_arange(cpu, BURNC_DTYPE_F32, 0, 1000, 1) : NULL;
        burnc_scope_begin();
        burnc_tensor_t *y = burnc_tensor_keep(burnc_add_scalar(burnc_mul_scalar(burnc_neg(x), 2.0), 1.0));
        burnc_scope_end();
        float v[1000];
        if (!y || burnc_tensor_read(y, v, sizeof v) != BURNC_OK)
            status |= 1;
        for (int i = 0; !(status & 1) && i < 1000; i++)
            if (v[i] != 1.0f - 2.0f * (float)i)
                status |= 1;
        burnc_tensor_release(y);
        burnc_tensor_release(x);
        burnc_device_release(cpu);
        if (llvm_mapped())
            status |= 2;
        _exit(status);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child process died");
    return WEXITSTATUS(status);
}

/* A second process finds the first one's kernels in the disk cache and never loads LLVM. */
Test(cpu, warm_disk_cache_needs_no_llvm)
{
    char dir[] = "/tmp/burnc-test-cache-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_CACHE_DIR", dir, 1);
    burnc_device_t *probe = open_cpu(); /* skips when there is no cpu device */
    burnc_device_release(probe);
    int first = chain_in_child();
    cr_assert_eq(first & 1, 0, "wrong result in the first process");
    cr_assert_eq(first & 2, 2, "the first process compiled without loading LLVM?");
    int second = chain_in_child();
    cr_assert_eq(second & 1, 0, "wrong result from the disk cache");
    cr_assert_eq(second & 2, 0, "the second process loaded LLVM despite a warm disk cache");
    bt_remove_dir(dir);
    unsetenv("BURNC_CACHE_DIR");
    BT_LEAK_CHECK();
}

/* ---- Denormals, eager mode, logs and dumps --------------------------------------------------- */

/* A host thread running with flush-to-zero and denormals-are-zero (what -ffast-math sets up)
 * starts the device's threads: they inherit that state and must clear it. */
Test(cpu, denormals_survive_a_fast_math_host)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | (1u << 15) | (1u << 6));
    burnc_device_t *cpu = burnc_device_open("cpu");
    _mm_setcsr(saved);
    if (!cpu)
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    const int64_t s[1] = {4};
    const float tiny[4] = {1e-40f, -3e-39f, 1e-20f, 1.0f};
    burnc_tensor_t *x = bt_f32(cpu, 1, s, tiny);
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(burnc_mul_scalar(burnc_add(x, x), 0.5)));
    burnc_tensor_t *z = burnc_tensor_keep(BT_NOT_NULL(burnc_mul(x, burnc_full(cpu, BURNC_DTYPE_F32, 1, s, 1e-20))));
    burnc_scope_end();
    float vy[4], vz[4];
    bt_read_f32(y, vy, 4);
    bt_read_f32(z, vz, 4);
    cr_assert_eq(vy[0], 1e-40f, "a denormal input was flushed: %g", (double)vy[0]);
    cr_assert_eq(vy[1], -3e-39f, "%g", (double)vy[1]);
    cr_assert_eq(vz[2], 1e-20f * 1e-20f, "a denormal result was flushed: %g", (double)vz[2]);
    burnc_tensor_release(z);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_device_release(cpu);
#else
    cr_skip_test("no MXCSR on this architecture");
#endif
    BT_LEAK_CHECK();
}

static atomic_int groups_seen, fused_records_seen;

static void count_groups(void *user, const char *topic, const char *msg)
{
    (void)user;
    int n;
    const char *p = strcmp(topic, "fusion") == 0 ? strstr(msg, " record") : NULL;
    if (p && strstr(msg, " group ")) {
        while (p > msg && p[-1] >= '0' && p[-1] <= '9')
            p--;
        n = atoi(p);
        atomic_fetch_add(&groups_seen, 1);
        if (n > atomic_load(&fused_records_seen))
            atomic_store(&fused_records_seen, n);
    }
}

/* One element-wise chain of four ops: how many groups and the largest group. */
static void run_four_ops(burnc_device_t *cpu, int *groups, int *largest)
{
    atomic_store(&groups_seen, 0);
    atomic_store(&fused_records_seen, 0);
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(cpu, BURNC_DTYPE_F32, 0, 64, 1));
    BT_ASSERT_OK(burnc_device_sync(cpu));
    atomic_store(&groups_seen, 0);
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(burnc_sqrt(burnc_exp(burnc_neg(burnc_mul_scalar(x, 0.1))))));
    burnc_scope_end();
    float v[64];
    bt_read_f32(y, v, 64);
    for (int i = 0; i < 64; i++)
        cr_assert_float_eq(v[i], expf(-0.05f * (float)i), 1e-6f, "element %d: %g", i, (double)v[i]);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    *groups = atomic_load(&groups_seen);
    *largest = atomic_load(&fused_records_seen);
}

Test(cpu, eager_from_environment_and_switch)
{
    burnc_log_set_callback(count_groups, NULL);
    setenv("BURNC_FUSION", "0", 1);
    burnc_device_t *cpu = open_cpu();
    unsetenv("BURNC_FUSION");
    int groups, largest;
    run_four_ops(cpu, &groups, &largest);
    cr_assert_eq(groups, 4, "BURNC_FUSION=0 ran %d groups", groups);
    cr_assert_eq(largest, 1, "BURNC_FUSION=0 fused %d records into one kernel", largest);
    BT_ASSERT_OK(burnc_device_set_fusion(cpu, true));
    run_four_ops(cpu, &groups, &largest);
    cr_assert_eq(groups, 1, "fusion on ran %d groups", groups);
    cr_assert_eq(largest, 4);
    BT_ASSERT_OK(burnc_device_set_fusion(cpu, false));
    run_four_ops(cpu, &groups, &largest);
    cr_assert_eq(groups, 4, "fusion off ran %d groups", groups);
    burnc_log_set_callback(NULL, NULL);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        n += len > sl && strcmp(e->d_name + len - sl, suffix) == 0;
    }
    closedir(d);
    return n;
}

Test(cpu, dump_dir_gets_plans_and_kernels)
{
    char dir[] = "/tmp/burnc-test-dump-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_DUMP_DIR", dir, 1);
    burnc_device_t *cpu = open_cpu();
    burnc_tensor_t *x = BT_NOT_NULL(burnc_arange(cpu, BURNC_DTYPE_F32, 0, 64, 1));
    burnc_scope_begin();
    burnc_tensor_t *y = burnc_tensor_keep(BT_NOT_NULL(burnc_sum(burnc_exp(burnc_neg(x)), 0, NULL, false)));
    burnc_scope_end();
    float v;
    BT_ASSERT_OK(burnc_tensor_read(y, &v, sizeof v));
    cr_assert(count_files(dir, ".dot") >= 1, "no plan written to %s", dir);
    cr_assert(count_files(dir, ".kir") >= 1, "no kernel IR written to %s", dir);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_device_release(cpu);
    unsetenv("BURNC_DUMP_DIR");
    bt_remove_dir(dir);
    BT_LEAK_CHECK();
}

/* ---- In-place reuse (DESIGN.md, step 2) ------------------------------------------------------ */

enum { IP_N = 64 * 64 };

/* A 64x64 f32 tensor with values in [-2, 2), made and computed: a buffer of its own. */
static burnc_tensor_t *ip_input(burnc_device_t *dev, float *host)
{
    for (int i = 0; i < IP_N; i++)
        host[i] = (float)uniform(-2, 2);
    burnc_tensor_t *x = bt_f32(dev, 2, (const int64_t[]){64, 64}, host);
    BT_ASSERT_OK(burnc_device_sync(dev));
    BT_ASSERT_OK(burnc_device_memory_cleanup(dev));
    return x;
}

/* t's IP_N elements equal want within a relative tolerance plus an absolute one. */
static void ip_expect(burnc_tensor_t *t, const float *want, float rtol, float atol)
{
    static float got[IP_N];
    bt_read_f32(t, got, IP_N);
    for (int i = 0; i < IP_N; i++)
        cr_assert(fabsf(got[i] - want[i]) <= rtol * fabsf(want[i]) + atol, "element %d: %a, expected %a", i, got[i],
                  want[i]);
}

/* exp(host) as ref computes it. */
static void ip_expect_exp(burnc_tensor_t *y, const float *host)
{
    static float want[IP_N];
    burnc_device_t *ref = bt_ref();
    burnc_tensor_t *xr = bt_f32(ref, 2, (const int64_t[]){64, 64}, host), *yr = BT_NOT_NULL(burnc_exp(xr));
    bt_read_f32(yr, want, IP_N);
    ip_expect(y, want, 0x1p-23f, 0); /* exp: within 1 ulp */
    burnc_tensor_release(yr);
    burnc_tensor_release(xr);
    burnc_device_release(ref);
}

/* An input nothing else refers to gives its buffer to the output, fused and eager: no buffer
 * is freed or allocated. */
Test(cpu, in_place_takes_a_released_input)
{
    static float host[IP_N];
    burnc_device_t *cpu = open_cpu();
    for (int fuse = 0; fuse < 2; fuse++) {
        BT_ASSERT_OK(burnc_device_set_fusion(cpu, fuse));
        burnc_tensor_t *x = ip_input(cpu, host);
        burnc_tensor_t *y = BT_NOT_NULL(burnc_exp(x));
        burnc_tensor_release(x);
        BT_ASSERT_OK(burnc_device_sync(cpu));
        burnc_memory_report_t m = bt_memory(cpu);
        cr_assert_eq(m.buffers_in_use, 1, "fuse %d: %llu buffers", fuse, (unsigned long long)m.buffers_in_use);
        cr_assert_eq(m.bytes_cached, 0, "fuse %d: a buffer was freed (%llu bytes cached)", fuse,
                     (unsigned long long)m.bytes_cached);
        ip_expect_exp(y, host);
        burnc_tensor_release(y);
    }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Inputs that must survive are never overwritten: one the user holds, one a second slot reads
 * through another index map, one read by a later kernel, caller memory, a broadcast one. */
Test(cpu, in_place_spares_inputs_still_in_use)
{
    static float host[IP_N], got[IP_N], want[IP_N];
    burnc_device_t *cpu = open_cpu();
    /* held by the user */
    burnc_tensor_t *x = ip_input(cpu, host);
    burnc_tensor_t *y = BT_NOT_NULL(burnc_exp(x));
    ip_expect_exp(y, host);
    ip_expect(x, host, 0, 0);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    /* read through a second slot with another index map: y = exp(x) + 2 x^T */
    burnc_device_t *ref = bt_ref();
    x = ip_input(cpu, host);
    burnc_tensor_t *t = BT_NOT_NULL(burnc_transpose(x, 0, 1));
    burnc_tensor_t *e = BT_NOT_NULL(burnc_exp(x)), *m = BT_NOT_NULL(burnc_mul_scalar(t, 2.0));
    burnc_tensor_release(t);
    burnc_tensor_release(x);
    y = BT_NOT_NULL(burnc_add(e, m));
    burnc_tensor_release(e);
    burnc_tensor_release(m);
    burnc_tensor_t *xr = bt_f32(ref, 2, (const int64_t[]){64, 64}, host);
    burnc_scope_begin();
    burnc_tensor_t *yr = burnc_tensor_keep(burnc_add(burnc_exp(xr), burnc_mul_scalar(burnc_transpose(xr, 0, 1), 2.0)));
    burnc_scope_end();
    bt_read_f32(BT_NOT_NULL(yr), want, IP_N);
    ip_expect(y, want, 0, 4e-6f); /* e^x < 7.4 within 1 ulp, one more rounding */
    burnc_tensor_release(y);
    /* read by a later group of the same flush: exp(x), then x @ x */
    x = ip_input(cpu, host);
    e = BT_NOT_NULL(burnc_exp(x));
    m = BT_NOT_NULL(burnc_matmul(x, x));
    burnc_tensor_release(x);
    ip_expect_exp(e, host);
    burnc_tensor_t *xr2 = bt_f32(ref, 2, (const int64_t[]){64, 64}, host), *mr = BT_NOT_NULL(burnc_matmul(xr2, xr2));
    bt_read_f32(mr, want, IP_N);
    ip_expect(m, want, 0, 1e-4f);
    burnc_tensor_release(mr);
    burnc_tensor_release(xr2);
    burnc_tensor_release(e);
    burnc_tensor_release(m);
    /* caller memory is never written */
    for (int i = 0; i < IP_N; i++)
        host[i] = (float)uniform(-2, 2);
    memcpy(want, host, sizeof want);
    x = BT_NOT_NULL(burnc_tensor_wrap(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){64, 64}, host, NULL, NULL));
    e = BT_NOT_NULL(burnc_exp(x));
    burnc_tensor_release(x);
    ip_expect_exp(e, want);
    cr_assert_arr_eq(host, want, sizeof want, "the wrapped caller memory changed");
    burnc_tensor_release(e);
    /* a broadcast input: [1, 64] + [64, 64] reads each element 64 times */
    x = ip_input(cpu, host);
    burnc_tensor_t *row = BT_NOT_NULL(burnc_slice(x, 0, 0, 1, 1));
    burnc_tensor_t *r2 = BT_NOT_NULL(burnc_mul_scalar(row, 1.0));
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_tensor_release(row);
    y = BT_NOT_NULL(burnc_add(r2, x));
    burnc_tensor_release(r2);
    bt_read_f32(y, got, IP_N);
    for (int i = 0; i < IP_N; i++)
        cr_assert_eq(got[i], host[i % 64] + host[i], "element %d", i);
    burnc_tensor_release(y);
    burnc_tensor_release(x);
    burnc_tensor_release(yr);
    burnc_tensor_release(xr);
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* A row kernel may write its element output over the row's input: softmax(x) with x released
 * equals softmax on ref, and takes x's buffer. */
Test(cpu, in_place_row_kernel)
{
    static float host[IP_N], want[IP_N];
    burnc_device_t *cpu = open_cpu();
    burnc_tensor_t *x = ip_input(cpu, host);
    burnc_tensor_t *y = BT_NOT_NULL(burnc_softmax(x, 1));
    burnc_tensor_release(x);
    BT_ASSERT_OK(burnc_device_sync(cpu));
    cr_assert_eq(bt_memory(cpu).bytes_cached, 0, "softmax did not take its input's buffer");
    burnc_device_t *ref = bt_ref();
    burnc_tensor_t *xr = bt_f32(ref, 2, (const int64_t[]){64, 64}, host), *yr = BT_NOT_NULL(burnc_softmax(xr, 1));
    bt_read_f32(yr, want, IP_N);
    ip_expect(y, want, 2e-6f, 0);
    burnc_tensor_release(yr);
    burnc_tensor_release(xr);
    burnc_tensor_release(y);
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- Reductions over a strided axis (codegen/llvm_cpu.c, "Columns") -------------------------
 * A reduction over the batch axis runs groups of adjacent rows at once. Its results must be
 * bitwise those of kernel.h's order: checked against a host transcription of that order, and
 * against the same reduction over a contiguous transposed copy (the one-row-at-a-time code,
 * which the suites above hold to kir_eval and ref), for row counts around the group size and
 * reduced lengths around the lane count and the leaf size. */

/* kernel.h's order for a sum of n values v[i * stride], in float or double arithmetic. */
#define COL_ORACLE(T, NAME)                                                                       \
    static T NAME(const T *v, int64_t n, int64_t stride)                                         \
    {                                                                                             \
        int64_t n_leaves = (n + 4095) / 4096;                                                     \
        T *leaf = calloc((size_t)(n_leaves ? n_leaves : 1), sizeof(T));                          \
        cr_assert_not_null(leaf);                                                                 \
        for (int64_t l = 0; l < n_leaves; l++) {                                                  \
            T lane[32] = {0};                                                                     \
            for (int64_t j = l * 4096; j < n && j < (l + 1) * 4096; j++)                          \
                lane[j % 32] += v[j * stride];                                                    \
            for (int w = 32; w > 1; w /= 2)                                                       \
                for (int i = 0; i < w / 2; i++)                                                   \
                    lane[i] = lane[2 * i] + lane[2 * i + 1];                                      \
            leaf[l] = lane[0];                                                                    \
        }                                                                                         \
        for (int64_t m = n_leaves; m > 1; m = (m + 1) / 2) {                                      \
            for (int64_t i = 0; i < m / 2; i++)                                                   \
                leaf[i] = leaf[2 * i] + leaf[2 * i + 1];                                          \
            if (m % 2)                                                                            \
                leaf[m / 2] = leaf[m - 1];                                                        \
        }                                                                                         \
        T r = n_leaves ? leaf[0] : 0;                                                             \
        free(leaf);                                                                               \
        return r;                                                                                 \
    }
COL_ORACLE(float, col_sum_f32)
COL_ORACLE(double, col_sum_f64)

static const int64_t COL_SHAPES[][2] = {{4097, 65}, {100, 32}, {33, 257}, {8193, 40}, {5, 300},
                                        {1, 33},    {64, 31},  {200, 1},  {4096, 96}, {31, 70}};

Test(cpu, column_sum_follows_the_reduction_order)
{
    burnc_device_t *cpu = open_cpu();
    const burnc_dtype_t dts[2] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        for (int s = 0; s < COUNT(COL_SHAPES); s++) {
            const int64_t *sh = COL_SHAPES[s];
            host h = host_new(dts[d], 2, sh, GENERAL);
            burnc_scope_begin();
            burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 2, sh, h.data));
            burnc_tensor_t *y = BT_NOT_NULL(burnc_sum(x, 1, (const int[]){0}, false));
            size_t es = burnc_dtype_size(h.dt);
            void *got = malloc((size_t)sh[1] * es);
            cr_assert_not_null(got);
            BT_ASSERT_OK(burnc_tensor_read(y, got, (size_t)sh[1] * es));
            burnc_scope_end();
            for (int64_t c = 0; c < sh[1]; c++) {
                double g, w;
                if (d == 0) {
                    g = ((float *)got)[c];
                    w = col_sum_f32((const float *)h.data + c, sh[0], sh[1]);
                } else {
                    g = ((double *)got)[c];
                    w = col_sum_f64((const double *)h.data + c, sh[0], sh[1]);
                }
                cr_assert(memcmp(&g, &w, sizeof g) == 0, "%s [%lld,%lld] column %lld: %.17g, order gives %.17g",
                          burnc_dtype_name(h.dt), (long long)sh[0], (long long)sh[1], (long long)c, g, w);
            }
            free(got);
            host_free(&h);
        }
    }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* op over axis 0 of x (a [R, C] tensor or view), kept. */
static burnc_tensor_t *col_reduce(burnc_tensor_t *x, int op, int axis)
{
    const int ax[1] = {axis};
    switch (op) {
    case 0: return burnc_sum(x, 1, ax, false);
    case 1: return burnc_max(x, 1, ax, false);
    case 2: return burnc_argmax(x, axis, false);
    case 3: return burnc_argmin(x, axis, false);
    case 4: return burnc_prod(burnc_add_scalar(burnc_mul_scalar(x, 1e-3), 1.0), 1, ax, false);
    case 5: return burnc_min(x, 1, ax, false);
    default: return burnc_mean(burnc_exp(burnc_mul_scalar(x, 0.25)), 1, ax, false);
    }
}

/* Reads t (of n elements) into a malloc'ed buffer. */
static void *col_read(burnc_tensor_t *t, int64_t n)
{
    size_t bytes = (size_t)(n ? n : 1) * burnc_dtype_size(burnc_tensor_dtype(t));
    void *p = malloc(bytes);
    cr_assert_not_null(p);
    BT_ASSERT_OK(burnc_tensor_read(t, p, bytes));
    return p;
}

static void col_expect_same(burnc_tensor_t *col, burnc_tensor_t *row, int64_t n, const char *what)
{
    cr_assert_eq(burnc_tensor_dtype(col), burnc_tensor_dtype(row));
    burnc_dtype_t dt = burnc_tensor_dtype(col);
    size_t es = burnc_dtype_size(dt);
    unsigned char *a = col_read(col, n), *b = col_read(row, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(memcmp(a + i * es, b + i * es, es) == 0, "%s: element %lld is %.9g over axis 0, %.9g over rows",
                  what, (long long)i, bt_load(a, dt, i), bt_load(b, dt, i));
    free(a);
    free(b);
}

/* Every combiner, every float dtype, with broadcast operands (a [C] row and an [R, 1] column)
 * and an offset view: over axis 0 equals over the rows of the transposed copy. */
Test(cpu, column_reductions_equal_row_reductions)
{
    burnc_device_t *cpu = open_cpu();
    const burnc_dtype_t dts[4] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    const int64_t shapes[][2] = {{4099, 67}, {70, 33}, {33, 100}, {9, 64}};
    for (int d = 0; d < 4; d++) {
        for (int s = 0; s < COUNT(shapes); s++) {
            const int64_t *sh = shapes[s], wsh[1] = {sh[1]}, bsh[2] = {sh[0], 1};
            host h = host_new(dts[d], 2, sh, SPECIAL), hw = host_new(dts[d], 1, wsh, GENERAL),
                 hb = host_new(dts[d], 2, bsh, GENERAL);
            bool narrow = d >= 2; /* f16/bf16: fewer combinations, the loads are what differs */
            for (int op = 0; op < (narrow ? 3 : 7); op++) {
                for (int form = 0; form < (narrow ? 2 : 3); form++) {
                    char what[96];
                    snprintf(what, sizeof what, "%s [%lld,%lld] op %d form %d", burnc_dtype_name(dts[d]),
                             (long long)sh[0], (long long)sh[1], op, form);
                    burnc_scope_begin();
                    burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 2, sh, h.data));
                    if (form == 1) {
                        burnc_tensor_t *w = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 1, wsh, hw.data));
                        burnc_tensor_t *b = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 2, bsh, hb.data));
                        x = BT_NOT_NULL(burnc_add(burnc_mul(x, w), b));
                    } else if (form == 2) {
                        x = BT_NOT_NULL(burnc_slice(burnc_slice(x, 0, 2, sh[0], 1), 1, 1, sh[1], 1));
                    }
                    int64_t n = burnc_tensor_shape(x)[1];
                    burnc_tensor_t *col = BT_NOT_NULL(col_reduce(x, op, 0));
                    burnc_tensor_t *row = BT_NOT_NULL(col_reduce(burnc_contiguous(burnc_transpose(x, 0, 1)), op, 1));
                    col_expect_same(col, row, n, what);
                    burnc_scope_end();
                }
            }
            host_free(&h);
            host_free(&hw);
            host_free(&hb);
        }
    }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Kernels with several stages and element outputs over axis 0: layer_norm and softmax of a
 * transposed view, and a batch sum that keeps its element-wise operand. */
Test(cpu, column_multi_stage_and_element_outputs)
{
    burnc_device_t *cpu = open_cpu();
    const int64_t shapes[][2] = {{300, 70}, {4097, 33}, {40, 64}};
    for (int s = 0; s < COUNT(shapes); s++) {
        const int64_t *sh = shapes[s];
        int64_t n = sh[0] * sh[1];
        host h = host_new(BURNC_DTYPE_F32, 2, sh, GENERAL), hw = host_new(BURNC_DTYPE_F32, 2, sh, GENERAL);
        burnc_scope_begin();
        burnc_tensor_t *x = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 2, sh, h.data));
        burnc_tensor_t *w = BT_NOT_NULL(burnc_tensor_from_data(cpu, h.dt, 2, sh, hw.data));
        burnc_tensor_t *xt = BT_NOT_NULL(burnc_transpose(x, 0, 1));
        burnc_tensor_t *xtc = BT_NOT_NULL(burnc_contiguous(xt));
        col_expect_same(burnc_layer_norm(xt, 1, 1e-5), burnc_layer_norm(xtc, 1, 1e-5), n, "layer_norm");
        col_expect_same(burnc_contiguous(burnc_transpose(burnc_softmax(x, 0), 0, 1)), burnc_softmax(xtc, 1), n,
                        "softmax");
        /* the operand kept: one kernel with an element output and a stage */
        burnc_tensor_t *p = BT_NOT_NULL(burnc_mul(burnc_exp(burnc_mul_scalar(x, 0.5)), w));
        burnc_tensor_t *sum = BT_NOT_NULL(burnc_sum(p, 1, (const int[]){0}, false));
        burnc_tensor_t *pt = BT_NOT_NULL(burnc_contiguous(burnc_transpose(p, 0, 1)));
        col_expect_same(sum, burnc_sum(pt, 1, (const int[]){1}, false), sh[1], "kept operand: sum");
        BT_ASSERT_OK(burnc_device_set_fusion(cpu, false));
        burnc_tensor_t *pe = BT_NOT_NULL(burnc_mul(burnc_exp(burnc_mul_scalar(x, 0.5)), w));
        BT_ASSERT_OK(burnc_device_set_fusion(cpu, true));
        col_expect_same(p, pe, n, "kept operand: element output");
        burnc_scope_end();
        host_free(&h);
        host_free(&hw);
    }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}
