/* Accuracy of the math functions written once in ir/math.c, run through the kernel-IR
 * interpreter kir_eval (the oracle every codegen must equal bitwise).
 *
 * Error measure: |got - ref| in units of the last place of the result format at ref, where ref
 * is a higher-precision value of the function:
 *   - f32: the double-precision libm result (not rounded to f32). libm's double functions are
 *     accurate to about 2^-52, 29 bits beyond f32, so a result that is correctly rounded to f32
 *     measures <= 0.5 ulp except in vanishingly rare near-tie cases;
 *   - f64: glibc's x87 long double functions (expl, logl, sinl, ...), accurate to about 2^-63:
 *     bounds for f64 are measured against them (11 bits beyond f64).
 * A bound of 1 ulp therefore means faithful rounding. Results equal to the reference rounded to
 * the format count 0 where either is infinite (overflow) and NaN must meet NaN.
 *
 * Coverage, per function:
 *   f32: every 1021st bit pattern of all 2^32 (4.2 million inputs, every exponent and both
 *        signs, NaNs and infinities included), plus every bit pattern in windows of 65536
 *        patterns around each tricky point (range-reduction boundaries, overflow and underflow
 *        thresholds, subnormals, 0, 1, polynomial switch points, multiples of pi/2);
 *        two-argument functions: every 1021st x against a changing y drawn from integers,
 *        halves, small and random values, plus dense windows.
 *   f64: 1000000 inputs: random bit patterns, uniform values in the function's interesting
 *        interval, log-uniform magnitudes of both signs, and values a few ulps around the
 *        tricky points.
 *   Special values (NaN, infinities, signed zeros, domain edges, C99 Annex F tables for atan2
 *   and pow) are checked bit-exactly. sin/cos/tan are measured for |x| < 2^17 (f32) and
 *   |x| < 2^36 (f64), the range their argument reduction is accurate on; beyond it sin and cos
 *   must stay in [-1, 1] and tan must not be NaN.
 * gelu, an op rather than a kir_ function, is measured the same way through kir_unary_op,
 * against x/2 erfcl(-x/sqrt 2) with the argument carried in two long doubles (gelu_l). */
#include <float.h>
#include <stdint.h>

#include "common.h"
#include "kernel.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef int32_t (*unary_fn)(kir_kernel *, int32_t);
typedef int32_t (*binary_fn)(kir_kernel *, int32_t, int32_t);

/* ---- References --------------------------------------------------------------------------- */

static double sigmoid_d(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static long double sigmoid_l(long double x)
{
    return x >= 0 ? 1.0L / (1.0L + expl(-x)) : expl(x) / (1.0L + expl(x));
}

/* gelu x = x/2 erfc(-x/sqrt 2) with the argument as th + tl to twice long double's precision:
 * erfc's relative condition number is 2 t^2, up to 1500 at f64's underflow, so a rounded t
 * would cost the reference 11 bits. erfc(th + tl) = erfc(th) - tl (2/sqrt pi) e^(-th^2) to
 * well below long double's rounding. */
static long double gelu_l(long double x)
{
    if (isinf(x))
        return x > 0 ? x : NAN; /* -inf * erfc(inf) = -inf * 0 */
    const long double s = 0xb504f333f9de6484p-64L, s_lo = 0x1.65f626cdd52bp-66L; /* 1/sqrt 2 */
    long double th = -x * s;
    long double tl = fmal(-x, s, -th) + -x * s_lo;
    long double e = erfcl(th) - tl * 1.1283791670955125738961589031215452L * expl(-th * th);
    return 0.5L * x * e;
}
static double gelu_d(double x) { return (double)gelu_l(x); }

/* gelu'(x) = Phi(x) + x phi(x), Phi from erfcl with the argument carried as in gelu_l. For
 * x < 0 the two terms cancel (gelu' has a zero at x = -0.75179...): errors are measured in ulps
 * of the larger of Phi(x) and |x| phi(x) there (gelu_grad_mag), the condition of that difference. */
static long double gelu_grad_l(long double x)
{
    if (isinf(x))
        return x > 0 ? 1.0L : -0.0L;
    const long double s = 0xb504f333f9de6484p-64L, s_lo = 0x1.65f626cdd52bp-66L; /* 1/sqrt 2 */
    long double th = -x * s;
    long double tl = fmal(-x, s, -th) + -x * s_lo;
    long double cdf = 0.5L * (erfcl(th) - tl * 1.1283791670955125738961589031215452L * expl(-th * th));
    return cdf + x * expl(-0.5L * x * x) * 0.3989422804014326779399460599343819L;
}
static double gelu_grad_d(double x) { return (double)gelu_grad_l(x); }
static long double gelu_grad_mag(long double x)
{
    if (isinf(x) || x >= 0)
        return 0;
    long double cdf = 0.5L * erfcl(-x * 0.7071067811865475244008443621048490L);
    long double xpdf = -x * expl(-0.5L * x * x) * 0.3989422804014326779399460599343819L;
    return cdf > xpdf ? cdf : xpdf;
}

/* gelu is an op, not a kir_ math function: its composition in ir/kernel_ops.c. */
static int32_t gelu_op(kir_kernel *k, int32_t x)
{
    if (x < 0 || x >= k->n_insts)
        return -1;
    return kir_unary_op(k, IR_OP_GELU, (kir_type)k->insts[x].type, x, NULL);
}

static int32_t gelu_grad_op(kir_kernel *k, int32_t x)
{
    if (x < 0 || x >= k->n_insts)
        return -1;
    return kir_unary_op(k, IR_OP_GELU_GRAD, (kir_type)k->insts[x].type, x, NULL);
}

/* One function under test. */
typedef struct mfn {
    const char *name;
    unary_fn u;
    binary_fn b;
    double (*r32)(double);
    long double (*r64)(long double);
    double (*r32b)(double, double);
    long double (*r64b)(long double, long double);
    double bound32, bound64; /* the documented maximum error in ulps */
    double trig32, trig64;   /* > 0: the accurate range |x| < trig (sin, cos, tan) */
    const double *pts;       /* tricky points (0-terminated list after the first entry) */
    int n_pts;
    double lo64, hi64;       /* interval for the uniform f64 samples */
} mfn;

/* What an error is measured in ulps of: the result, except for gelu' (gelu_grad_mag). */
static long double mag_of(const mfn *f, long double x, long double ref)
{
    long double m = f->r64 == gelu_grad_l ? gelu_grad_mag(x) : 0;
    return m > fabsl(ref) ? m : ref;
}

/* Inputs x < at (at < 0; {0, 0}: none) held to a bound of their own (gelu: see F_GELU). */
typedef struct band {
    double at, bound;
} band;

static const band NO_BAND = {0, 0};

static bool in_band(band bd, double x) { return bd.at < 0 && x < bd.at; }

/* ---- A one-function kernel and its launch ----------------------------------------------- */

typedef struct mk {
    kir_kernel k;
    burnc_dtype_t dt;
    int arity;
} mk;

static void mk_build(mk *m, const mfn *f, burnc_dtype_t dt)
{
    kir_type t = dt == BURNC_DTYPE_F32 ? KIR_F32 : KIR_F64;
    m->dt = dt;
    m->arity = f->u ? 1 : 2;
    kir_init(&m->k, 1, 1);
    m->k.n_inputs = m->arity;
    m->k.n_outputs = 1;
    for (int i = 0; i < m->arity; i++) {
        m->k.inputs[i].dtype = dt;
        m->k.inputs[i].stride[0] = KIR_STRIDE_UNIT;
    }
    m->k.outputs[0].dtype = dt;
    m->k.outputs[0].stride[0] = KIR_STRIDE_UNIT;
    int32_t x = kir_emit(&m->k, KIR_LOAD, t, 0, -1, -1);
    int32_t y = m->arity == 2 ? kir_emit(&m->k, KIR_LOAD, t, 1, -1, -1) : -1;
    int32_t r = f->u ? f->u(&m->k, x) : f->b(&m->k, x, y);
    cr_assert_geq(r, 0, "%s: the builder failed", f->name);
    cr_assert_eq(m->k.insts[r].type, t, "%s: result type %d", f->name, m->k.insts[r].type);
    m->k.n_stores = 1;
    m->k.stores[0] = (kir_store){.slot = 0, .value = r, .row = false};
    snprintf(m->k.name, sizeof m->k.name, "math_%s", f->name);
    char why[256];
    cr_assert(kir_valid(&m->k, why, sizeof why), "%s: invalid kernel: %s", f->name, why);
}

/* out[i] = f(x[i] (, y[i])) for n elements. */
static void mk_run(mk *m, const void *x, const void *y, void *out, int64_t n)
{
    void *ins[2] = {(void *)x, (void *)y};
    void *outs[1] = {out};
    int64_t ext[1] = {n}, off[2] = {0, 0}, str[2] = {1, 1};
    kir_args a = {.inputs = ins, .outputs = outs, .extents = ext, .in_offsets = off, .in_strides = str,
                  .out_offsets = off, .out_strides = str, .scalars = NULL};
    BT_ASSERT_OK(kir_eval(&m->k, &a));
}

/* ---- Error measure -------------------------------------------------------------------------- */

/* |got - ref| in ulps of the format (precision p, smallest exponent emin) at mag: ref itself,
 * or what the error is measured against (mag_of). */
static double ulp_err(long double got, long double ref, long double rounded, long double mag, int p, int emin)
{
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got) ? 0 : INFINITY;
    if (isinf(got) || isinf(rounded))
        return got == rounded ? 0 : INFINITY;
    int e = mag == 0 ? emin : ilogbl(mag);
    if (e < emin)
        e = emin;
    return (double)(fabsl(got - ref) / ldexpl(1.0L, e - (p - 1)));
}

/* The worst case seen so far. */
typedef struct worst {
    double err;
    double x, y, got, ref;
    long n;
} worst;

static void note(worst *w, double err, double x, double y, double got, double ref)
{
    w->n++;
    if (err > w->err || (isnan(err) && !isnan(w->err)))
        *w = (worst){err, x, y, got, ref, w->n};
}

/* Prints and asserts the worst errors: w[0] against bound, w[1] (the inputs of the band, if
 * any) against the band's bound. */
static void report(const mfn *f, const char *type, const worst w[2], double bound, band bd)
{
    for (int i = 0; i < (bd.at < 0 ? 2 : 1); i++) {
        char what[64] = "";
        if (i)
            snprintf(what, sizeof what, " (x < %g)", bd.at);
        double lim = i ? bd.bound : bound;
        fprintf(stderr, "# %s %s%s: max error %.4f ulp at x=%a y=%a (got %a, ref %a); %ld inputs\n", f->name, type,
                what, w[i].err, w[i].x, w[i].y, w[i].got, w[i].ref, w[i].n);
        cr_assert(w[i].err <= lim, "%s %s%s: error %.4f ulp > %.2f at x=%a y=%a: got %a, reference %a", f->name, type,
                  what, w[i].err, lim, w[i].x, w[i].y, w[i].got, w[i].ref);
    }
}

static bool trig_outside(double x, double lim)
{
    return lim > 0 && !(fabs(x) < lim) && !isnan(x);
}

/* Range check for sin/cos/tan beyond the accurate range. */
static void check_outside(const mfn *f, double x, double got)
{
    if (isinf(x))
        cr_assert(isnan(got), "%s(%a) = %a, expected NaN", f->name, x, got);
    else if (f->u == kir_tan)
        cr_assert(!isnan(got), "%s(%a) = NaN beyond the accurate range", f->name, x);
    else
        cr_assert(fabs(got) <= 1.0, "%s(%a) = %a, outside [-1, 1]", f->name, x, got);
}

/* ---- f32 sweeps ------------------------------------------------------------------------------ */

enum { BATCH = 16384, STRIDE32 = 1021, WINDOW32 = 32768 };

typedef struct batch32 {
    float x[BATCH], y[BATCH], out[BATCH];
    int n;
} batch32;

static void flush32(mk *m, const mfn *f, band bd, batch32 *b, worst w[2])
{
    if (!b->n)
        return;
    mk_run(m, b->x, b->y, b->out, b->n);
    for (int i = 0; i < b->n; i++) {
        double x = b->x[i], y = b->y[i], got = b->out[i];
        if (trig_outside(x, f->trig32)) {
            check_outside(f, x, got);
            continue;
        }
        double ref = f->u ? f->r32(x) : f->r32b(x, y);
        note(&w[in_band(bd, x)], ulp_err(got, ref, (float)ref, mag_of(f, x, ref), 24, -126), x, y, got, ref);
    }
    b->n = 0;
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* xorshift64: reproducible samples */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A second argument for pow and atan2: small integers and halves (pow's integer and
 * odd/even cases), values of moderate size, and arbitrary patterns. */
static float y32(uint64_t *s)
{
    uint64_t r = rnd(s);
    switch (r % 4) {
    case 0: return (float)((int)(r >> 8) % 41 - 20) * ((r >> 40) & 1 ? 0.5f : 1.0f);
    case 1: return ((float)(uint32_t)(r >> 32) * 0x1p-32f - 0.5f) * 64.0f;
    case 2: return f32_of((uint32_t)(r >> 16)) * ((r >> 60) ? 1.0f : -1.0f);
    default: return ldexpf((float)(uint32_t)(r >> 40) * 0x1p-24f + 0.5f, (int)((r >> 8) % 60) - 30);
    }
}

static void push32(mk *m, const mfn *f, band bd, batch32 *b, worst w[2], float x, float y)
{
    b->x[b->n] = x;
    b->y[b->n] = y;
    if (++b->n == BATCH)
        flush32(m, f, bd, b, w);
}

static void sweep32(const mfn *f, band bd)
{
    static batch32 b; /* 192 KiB: off the worker's stack */
    mk m;
    mk_build(&m, f, BURNC_DTYPE_F32);
    worst w[2] = {{.err = 0}, {.err = 0}};
    uint64_t s = 0x9e3779b97f4a7c15u;
    b.n = 0;
    for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += STRIDE32)
        push32(&m, f, bd, &b, w, f32_of((uint32_t)u), y32(&s));
    for (int p = 0; p < f->n_pts; p++) {
        uint32_t c = bits32((float)f->pts[p]);
        for (int64_t d = -WINDOW32; d < WINDOW32; d++) {
            int64_t u = (int64_t)c + d;
            if (u < 0 || u > UINT32_MAX || ((u ^ c) & 0x80000000u))
                continue; /* stay on the point's side of zero */
            push32(&m, f, bd, &b, w, f32_of((uint32_t)u), f->u ? 0.0f : y32(&s));
        }
    }
    flush32(&m, f, bd, &b, w);
    report(f, "f32", w, f->bound32, bd);
    kir_free(&m.k);
}

/* ---- f64 samples ------------------------------------------------------------------------------ */

enum { N64 = 1000000 };

typedef struct batch64 {
    double x[BATCH], y[BATCH], out[BATCH];
    int n;
} batch64;

static void flush64(mk *m, const mfn *f, band bd, batch64 *b, worst w[2])
{
    if (!b->n)
        return;
    mk_run(m, b->x, b->y, b->out, b->n);
    for (int i = 0; i < b->n; i++) {
        double x = b->x[i], y = b->y[i], got = b->out[i];
        if (trig_outside(x, f->trig64)) {
            check_outside(f, x, got);
            continue;
        }
        long double ref = f->u ? f->r64(x) : f->r64b(x, y);
        note(&w[in_band(bd, x)], ulp_err(got, ref, (double)ref, mag_of(f, x, ref), 53, -1022), x, y, got, (double)ref);
    }
    b->n = 0;
}

static double f64_of(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static double unit(uint64_t *s) { return (double)(rnd(s) >> 11) * 0x1p-53; }

static double y64(uint64_t *s)
{
    uint64_t r = rnd(s);
    switch (r % 4) {
    case 0: return (double)((int)(r >> 8) % 61 - 30) * ((r >> 40) & 1 ? 0.5 : 1.0);
    case 1: return (unit(s) - 0.5) * 128.0;
    case 2: return f64_of(rnd(s));
    default: return ldexp(unit(s) + 0.5, (int)((r >> 8) % 120) - 60) * ((r >> 50) & 1 ? 1 : -1);
    }
}

/* One f64 input: a mix of the sampling schemes of the header. */
static double x64(const mfn *f, uint64_t *s)
{
    uint64_t r = rnd(s);
    switch (r % 5) {
    case 0: return f64_of(rnd(s));
    case 1:
    case 2: return f->lo64 + (f->hi64 - f->lo64) * unit(s);
    case 3: return ldexp(unit(s) + 0.5, (int)((r >> 8) % 140) - 100) * ((r >> 50) & 1 ? 1 : -1);
    default: {
        double c = f->n_pts ? f->pts[(r >> 8) % (uint64_t)f->n_pts] : 1.0;
        int64_t d = (int64_t)((r >> 20) % 2001) - 1000;
        uint64_t u;
        memcpy(&u, &c, sizeof u);
        return f64_of(u + (uint64_t)d);
    }
    }
}

static void sample64(const mfn *f, band bd)
{
    static batch64 b;
    mk m;
    mk_build(&m, f, BURNC_DTYPE_F64);
    worst w[2] = {{.err = 0}, {.err = 0}};
    uint64_t s = 0x2545f4914f6cdd1du;
    b.n = 0;
    for (int i = 0; i < N64; i++) {
        b.x[b.n] = x64(f, &s);
        b.y[b.n] = f->u ? 0.0 : y64(&s);
        if (++b.n == BATCH)
            flush64(&m, f, bd, &b, w);
    }
    flush64(&m, f, bd, &b, w);
    report(f, "f64", w, f->bound64, bd);
    kir_free(&m.k);
}

/* ---- The functions, their bounds and tricky points ----------------------------------------- */

#define PTS(...) (const double[]){__VA_ARGS__}, (int)COUNT(((const double[]){__VA_ARGS__}))

/* Bounds documented in include/burnc.h (max error in ulps). */
static const mfn F_EXP = {"exp", kir_exp, NULL, exp, expl, NULL, NULL, 1.0, 1.0, 0, 0,
                          PTS(0x1p-30, -0x1p-30, 0.34657359, -0.34657359, 88.72, -87.33, -103.9, 709.78, -708.4,
                              -745.1, 1.0, -1.0),
                          -750, 750};
static const mfn F_EXP2 = {"exp2", kir_exp2, NULL, exp2, exp2l, NULL, NULL, 1.0, 1.0, 0, 0,
                           PTS(0x1p-30, -0x1p-30, 0.5, -0.5, 127.99, -126.0, -149.9, 1023.99, -1022.0, -1074.5, 1.0),
                           -1080, 1080};
static const mfn F_EXPM1 = {"expm1", kir_expm1, NULL, expm1, expm1l, NULL, NULL, 1.0, 1.0, 0, 0,
                            PTS(0x1p-30, -0x1p-30, 0.34657359, -0.34657359, 88.72, -17.0, -37.5, 709.78, 1.0,
                                -1.0, 0x1p-126),
                            -50, 710};
static const mfn F_LOG = {"log", kir_log, NULL, log, logl, NULL, NULL, 1.0, 1.0, 0, 0,
                          PTS(1.0, 0.70710678, 1.41421356, 0x1p-149, 0x1p-130, 0x1p-126, 3.4e38, 0.5, 2.0, 1e-300),
                          0, 4};
static const mfn F_LOG2 = {"log2", kir_log2, NULL, log2, log2l, NULL, NULL, 1.0, 1.0, 0, 0,
                           PTS(1.0, 0.70710678, 1.41421356, 0x1p-149, 0x1p-130, 0x1p-126, 3.4e38, 0.5, 2.0, 1e-300),
                           0, 4};
static const mfn F_LOG1P = {"log1p", kir_log1p, NULL, log1p, log1pl, NULL, NULL, 1.0, 1.0, 0, 0,
                            PTS(0x1p-30, -0x1p-30, -0.29289322, 0.41421356, -0.99999, -0.5, 1.0, 1e30, 0x1p-126),
                            -1, 4};
static const mfn F_SIN = {"sin", kir_sin, NULL, sin, sinl, NULL, NULL, 1.0, 1.0, 0x1p17, 0x1p36,
                          PTS(0x1p-20, 0.78539816, 1.57079633, 3.14159265, 4.71238898, 6.28318531, 10000.0,
                              102943.7, 131000.0, 1e6, 6.8e10),
                          -100, 100};
static const mfn F_COS = {"cos", kir_cos, NULL, cos, cosl, NULL, NULL, 1.0, 1.0, 0x1p17, 0x1p36,
                          PTS(0x1p-20, 0.78539816, 1.57079633, 3.14159265, 4.71238898, 6.28318531, 10000.0,
                              102943.7, 131000.0, 1e6, 6.8e10),
                          -100, 100};
static const mfn F_TAN = {"tan", kir_tan, NULL, tan, tanl, NULL, NULL, 1.0, 1.0, 0x1p17, 0x1p36,
                          PTS(0x1p-20, 0.78539816, 1.57079633, 3.14159265, 4.71238898, 6.28318531, 10000.0,
                              102943.7, 131000.0, 1e6, 6.8e10),
                          -100, 100};
static const mfn F_TANH = {"tanh", kir_tanh, NULL, tanh, tanhl, NULL, NULL, 1.0, 1.0, 0, 0,
                           PTS(0x1p-20, 0.625, -0.625, 9.0, 19.0, 1.0, 0x1p-126),
                           -25, 25};
static const mfn F_ERF = {"erf", kir_erf, NULL, erf, erfl, NULL, NULL, 1.0, 1.0, 0, 0,
                          PTS(0x1p-20, 1.0, -1.0, 2.25, 3.75, 3.9375, 5.92, 6.0, 0x1p-126),
                          -7, 7};
static const mfn F_ERFC = {"erfc", kir_erfc, NULL, erfc, erfcl, NULL, NULL, 1.0, 1.0, 0, 0,
                           PTS(0x1p-20, 0.5, -0.5, 1.0, 1.5, 2.5, -2.5, 4.0, 9.19, 10.0542, 10.0625, 26.55, 27.226,
                               27.25, 0x1p-126),
                           -7, 28};
static const mfn F_GELU = {"gelu", gelu_op, NULL, gelu_d, gelu_l, NULL, NULL, 3.0, 3.0, 0, 0,
                           PTS(0x1p-20, -0.70710678, 0.70710678, -1.41421356, -3.5355339, -13.0, -14.21,
                               -14.23, -14.5, -5.1111, -37.5, -38.5, 0x1p-126),
                           -40, 10};
static const mfn F_GELU_GRAD = {"gelu_grad", gelu_grad_op, NULL, gelu_grad_d, gelu_grad_l, NULL, NULL, 4.0, 5.0,
                                0, 0,
                                PTS(0x1p-20, -0.75179, -0.5, 0.5, -2.0, 2.0, -5.5, -13.0, -14.42, -14.5, 14.5, -37.5,
                                    -38.5, 0x1p-126),
                                -40, 10};
static const mfn F_SIGMOID = {"sigmoid", kir_sigmoid, NULL, sigmoid_d, sigmoid_l, NULL, NULL, 1.0, 1.0, 0, 0,
                              PTS(0x1p-20, -0x1p-20, -87.0, -103.5, 16.6, -745.0, 36.7, -708.0),
                              -750, 40};
static const mfn F_ATAN2 = {"atan2", NULL, kir_atan2, NULL, NULL, atan2, atan2l, 1.0, 1.0, 0, 0,
                            PTS(1.0, -1.0, 0.4375, 0.6875, 0x1p-140, 3e38),
                            -10, 10};
static const mfn F_POW = {"pow", NULL, kir_pow, NULL, NULL, pow, powl, 1.0, 1.0, 0, 0,
                          PTS(1.0, 0.999, 1.001, 2.0, -2.0, 0.5, 0x1p-140, 3e38, -1.0, 10.0),
                          0, 16};

#define ACCURACY_TESTS(fn)                                                                        \
    Test(math, fn##_f32, .timeout = 120) { sweep32(&F_##fn, NO_BAND); BT_LEAK_CHECK(); }          \
    Test(math, fn##_f64, .timeout = 120) { sample64(&F_##fn, NO_BAND); BT_LEAK_CHECK(); }

ACCURACY_TESTS(EXP)
ACCURACY_TESTS(EXP2)
ACCURACY_TESTS(EXPM1)
ACCURACY_TESTS(LOG)
ACCURACY_TESTS(LOG2)
ACCURACY_TESTS(LOG1P)
ACCURACY_TESTS(SIN)
ACCURACY_TESTS(COS)
ACCURACY_TESTS(TAN)
ACCURACY_TESTS(TANH)
ACCURACY_TESTS(ERF)
ACCURACY_TESTS(ERFC)

/* gelu of f16 and bf16 values, as fusion lowers it (kir_unary_op_to: kir_gelu16's f32 math, then
 * the store's rounding): every one of the 65536 inputs of each format, against gelu_l, in ulps
 * of the 16-bit format. kir_gelu16's f32 error (about 2^-20 relative) adds 2^-9 (f16) and 2^-12
 * (bf16) units to the store's half unit; the subnormal results of the 16-bit format are measured
 * in its smallest subnormal's units the same way. Also counts the results that are not the
 * correctly rounded ones (near ties only). */
static void sweep16(burnc_dtype_t dt, int p, int emin, double bound)
{
    mk m;
    kir_init(&m.k, 1, 1);
    m.dt = dt;
    m.arity = 1;
    m.k.n_inputs = m.k.n_outputs = 1;
    m.k.inputs[0] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_UNIT}};
    m.k.outputs[0] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_UNIT}};
    int32_t r = kir_unary_op_to(&m.k, IR_OP_GELU, KIR_F32, kir_emit(&m.k, KIR_LOAD, KIR_F32, 0, -1, -1), NULL, dt);
    m.k.n_stores = 1;
    m.k.stores[0] = (kir_store){.slot = 0, .value = r};
    char why[256];
    cr_assert(kir_valid(&m.k, why, sizeof why), "gelu16: invalid kernel: %s", why);
    static uint16_t x[65536], y[65536];
    for (int i = 0; i < 65536; i++)
        x[i] = (uint16_t)i;
    mk_run(&m, x, NULL, y, 65536);
    bool h = dt == BURNC_DTYPE_F16;
    worst w = {0};
    long off = 0;
    for (int i = 0; i < 65536; i++) {
        double xv = h ? ir_f16_to_f64(x[i]) : ir_bf16_to_f64(x[i]), got = h ? ir_f16_to_f64(y[i]) : ir_bf16_to_f64(y[i]);
        long double ref = gelu_l(xv);
        double rounded = h ? ir_f16_to_f64(ir_f64_to_f16((double)ref)) : ir_bf16_to_f64(ir_f64_to_bf16((double)ref));
        double err = ulp_err(got, ref, rounded, ref, p, emin);
        note(&w, err, xv, 0, got, (double)ref);
        off += !isnan(got) && got != rounded && !(got == 0 && rounded == 0);
    }
    fprintf(stderr, "# gelu %s: max error %.4f ulp at x=%a (got %a, ref %a); %ld of 65536 not correctly rounded\n",
            burnc_dtype_name(dt), w.err, w.x, w.got, w.ref, off);
    cr_assert(w.err <= bound, "gelu %s: error %.4f ulp > %.4f at x=%a: got %a, reference %a", burnc_dtype_name(dt),
              w.err, bound, w.x, w.got, w.ref);
    kir_free(&m.k);
}

Test(math, GELU_f16_bf16_every_input)
{
    sweep16(BURNC_DTYPE_F16, 11, -14, 0.5 + 0x1p-8);
    sweep16(BURNC_DTYPE_BF16, 8, -126, 0.5 + 0x1p-11);
    BT_LEAK_CHECK();
}

/* gelu, as an op (f32: one exp, a reciprocal and a polynomial, within 2 ulps measured; f64: erfc
 * and the composition's two roundings), in ulps of the result (3).
 * Below x = -13.0031 (f32) and -37.5379 (f64), erfc(-x/sqrt 2) < 2^-126 (2^-1022) is subnormal,
 * off by up to about one unit of the smallest subnormal, which the factor x/2 multiplies: there
 * the bound is 0.6 |x| + 1 such units (the results are subnormal or barely normal; gelu rounds
 * to -0 below x = -14.3 and -38.6), at most 10 (f32) and 25 (f64). */
static const band GELU_BAND32 = {-13.0031, 10.0}, GELU_BAND64 = {-37.5379, 25.0};
Test(math, GELU_f32, .timeout = 120)
{
    sweep32(&F_GELU, GELU_BAND32);
    BT_LEAK_CHECK();
}
Test(math, GELU_f64, .timeout = 120)
{
    sample64(&F_GELU, GELU_BAND64);
    BT_LEAK_CHECK();
}
/* gelu', as an op: one exp, a division and a polynomial (f32), erfc and exp (f64), in ulps of
 * the result, or for x < 0 of the larger of Phi(x) and |x| phi(x) (their difference cancels
 * near gelu's minimum). Where the result is subnormal or nearly so (x < -13.2 for f32, -37.5 for
 * f64) the bound is in units of the smallest subnormal: f32 rounds there once; f64 rounds
 * e^(-x^2/2) there, half a unit that |x| / sqrt(2 pi) (up to 16) multiplies. */
static const band GELU_GRAD_BAND32 = {-13.2, 4.0}, GELU_GRAD_BAND64 = {-37.5, 16.0};
Test(math, GELU_GRAD_f32, .timeout = 120)
{
    sweep32(&F_GELU_GRAD, GELU_GRAD_BAND32);
    BT_LEAK_CHECK();
}
Test(math, GELU_GRAD_f64, .timeout = 120)
{
    sample64(&F_GELU_GRAD, GELU_GRAD_BAND64);
    BT_LEAK_CHECK();
}
ACCURACY_TESTS(SIGMOID)
ACCURACY_TESTS(ATAN2)
ACCURACY_TESTS(POW)

/* ---- Special values, bit-exact ------------------------------------------------------------- */

/* f(x (, y)) for a list of inputs, in both types; expected values given as double. */
typedef struct sv {
    double x, y, want;
} sv;

static bool same(double got, double want)
{
    if (isnan(want))
        return isnan(got);
    return got == want && signbit(got) == signbit(want);
}

static void check_specials(const mfn *f, const sv *cases, int n)
{
    for (int ti = 0; ti < 2; ti++) {
        burnc_dtype_t dt = ti ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
        mk m;
        mk_build(&m, f, dt);
        float x32[64], y32_[64], o32[64];
        double x64_[64], y64_[64], o64[64];
        cr_assert(n <= 64);
        for (int i = 0; i < n; i++) {
            x32[i] = (float)cases[i].x, y32_[i] = (float)cases[i].y;
            x64_[i] = cases[i].x, y64_[i] = cases[i].y;
        }
        if (ti)
            mk_run(&m, x64_, y64_, o64, n);
        else
            mk_run(&m, x32, y32_, o32, n);
        for (int i = 0; i < n; i++) {
            double got = ti ? o64[i] : (double)o32[i];
            double want = ti ? cases[i].want : (double)(float)cases[i].want;
            cr_assert(same(got, want), "%s %s(%a, %a) = %a, expected %a", ti ? "f64" : "f32", f->name, cases[i].x,
                      cases[i].y, got, want);
        }
        kir_free(&m.k);
    }
}

#define INF INFINITY
#define QNAN NAN

Test(math, specials_exp)
{
    const sv c[] = {{QNAN, 0, QNAN}, {INF, 0, INF}, {-INF, 0, 0.0}, {0.0, 0, 1.0}, {-0.0, 0, 1.0},
                    {2000.0, 0, INF}, {-2000.0, 0, 0.0}, {1e300, 0, INF}, {-1e300, 0, 0.0}};
    check_specials(&F_EXP, c, COUNT(c));
    check_specials(&F_EXP2, c, COUNT(c));
    const sv e2[] = {{1.0, 0, 2.0}, {10.0, 0, 1024.0}, {-1.0, 0, 0.5}, {-149.0, 0, 0x1p-149}, {127.0, 0, 0x1p127}};
    check_specials(&F_EXP2, e2, COUNT(e2));
    const sv m1[] = {{QNAN, 0, QNAN}, {INF, 0, INF}, {-INF, 0, -1.0}, {0.0, 0, 0.0}, {-0.0, 0, -0.0},
                     {1000.0, 0, INF}, {-1000.0, 0, -1.0}, {0x1p-149, 0, 0x1p-149}, {-0x1p-149, 0, -0x1p-149}};
    check_specials(&F_EXPM1, m1, COUNT(m1));
    BT_LEAK_CHECK();
}

/* exp's results in the subnormal range round once, correctly (denormals are preserved). */
Test(math, exp_subnormal_results)
{
    mk m;
    mk_build(&m, &F_EXP, BURNC_DTYPE_F32);
    float x[2048], o[2048];
    int n = 0;
    for (float v = -103.9f; v < -87.4f && n < 2048; v += 0.0081f)
        x[n++] = v;
    mk_run(&m, x, x, o, n);
    for (int i = 0; i < n; i++) {
        float want = (float)exp((double)x[i]);
        cr_assert(fabsf(o[i] - want) <= 0x1p-149f, "exp(%a) = %a, expected %a", x[i], o[i], want);
        cr_assert(o[i] > 0.0f, "exp(%a) flushed to 0", x[i]);
    }
    kir_free(&m.k);
    BT_LEAK_CHECK();
}

Test(math, specials_log)
{
    const sv c[] = {{QNAN, 0, QNAN}, {INF, 0, INF}, {-INF, 0, QNAN}, {0.0, 0, -INF}, {-0.0, 0, -INF},
                    {-1.0, 0, QNAN}, {1.0, 0, 0.0}, {-0x1p-149, 0, QNAN}};
    check_specials(&F_LOG, c, COUNT(c));
    check_specials(&F_LOG2, c, COUNT(c));
    const sv l2[] = {{2.0, 0, 1.0}, {0x1p-149, 0, -149.0}, {0x1p100, 0, 100.0}, {0.5, 0, -1.0}};
    check_specials(&F_LOG2, l2, COUNT(l2));
    const sv p[] = {{QNAN, 0, QNAN}, {INF, 0, INF}, {-INF, 0, QNAN}, {0.0, 0, 0.0}, {-0.0, 0, -0.0},
                    {-1.0, 0, -INF}, {-2.0, 0, QNAN}, {0x1p-149, 0, 0x1p-149}, {-0x1p-149, 0, -0x1p-149}};
    check_specials(&F_LOG1P, p, COUNT(p));
    BT_LEAK_CHECK();
}

Test(math, specials_trig)
{
    const sv s[] = {{QNAN, 0, QNAN}, {INF, 0, QNAN}, {-INF, 0, QNAN}, {0.0, 0, 0.0}, {-0.0, 0, -0.0},
                    {0x1p-149, 0, 0x1p-149}, {-0x1p-149, 0, -0x1p-149}};
    check_specials(&F_SIN, s, COUNT(s));
    check_specials(&F_TAN, s, COUNT(s));
    const sv c[] = {{QNAN, 0, QNAN}, {INF, 0, QNAN}, {-INF, 0, QNAN}, {0.0, 0, 1.0}, {-0.0, 0, 1.0},
                    {0x1p-149, 0, 1.0}};
    check_specials(&F_COS, c, COUNT(c));
    /* far beyond the accurate range: still in [-1, 1], never NaN */
    const mfn *fs[] = {&F_SIN, &F_COS, &F_TAN};
    const double big[] = {1e30, -3e38, 0x1p100, 1e300, -0x1.fffffffffffffp1023, 0x1p60 + 1};
    for (size_t i = 0; i < COUNT(fs); i++)
        for (int ti = 0; ti < 2; ti++) {
            mk m;
            mk_build(&m, fs[i], ti ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32);
            for (size_t j = 0; j < COUNT(big); j++) {
                double got;
                if (ti) {
                    mk_run(&m, &big[j], &big[j], &got, 1);
                } else {
                    float x = (float)big[j], o;
                    if (isinf(x))
                        continue;
                    mk_run(&m, &x, &x, &o, 1);
                    got = o;
                }
                check_outside(fs[i], big[j], got);
            }
            kir_free(&m.k);
        }
    BT_LEAK_CHECK();
}

Test(math, specials_tanh_erf_sigmoid)
{
    const sv t[] = {{QNAN, 0, QNAN}, {INF, 0, 1.0}, {-INF, 0, -1.0}, {0.0, 0, 0.0}, {-0.0, 0, -0.0},
                    {30.0, 0, 1.0}, {-30.0, 0, -1.0}, {1e300, 0, 1.0}, {0x1p-149, 0, 0x1p-149}};
    check_specials(&F_TANH, t, COUNT(t));
    const sv e[] = {{QNAN, 0, QNAN}, {INF, 0, 1.0}, {-INF, 0, -1.0}, {0.0, 0, 0.0}, {-0.0, 0, -0.0},
                    {6.0, 0, 1.0}, {-6.0, 0, -1.0}, {1e300, 0, 1.0}};
    check_specials(&F_ERF, e, COUNT(e));
    const sv s[] = {{QNAN, 0, QNAN}, {INF, 0, 1.0}, {-INF, 0, 0.0}, {0.0, 0, 0.5}, {-0.0, 0, 0.5},
                    {800.0, 0, 1.0}, {-800.0, 0, 0.0}, {1e300, 0, 1.0}, {-1e300, 0, 0.0}};
    check_specials(&F_SIGMOID, s, COUNT(s));
    BT_LEAK_CHECK();
}

Test(math, specials_erfc_gelu)
{
    const sv e[] = {{QNAN, 0, QNAN}, {INF, 0, 0.0}, {-INF, 0, 2.0}, {0.0, 0, 1.0}, {-0.0, 0, 1.0},
                    {0x1p-149, 0, 1.0}, {-0x1p-149, 0, 1.0}, {30.0, 0, 0.0}, {-30.0, 0, 2.0}, {1e300, 0, 0.0},
                    {-1e300, 0, 2.0}, {3e38, 0, 0.0}, {-3e38, 0, 2.0}};
    check_specials(&F_ERFC, e, COUNT(e));
    const sv g[] = {{QNAN, 0, QNAN}, {INF, 0, INF},   {-INF, 0, QNAN}, {0.0, 0, 0.0},   {-0.0, 0, -0.0},
                    {-40.0, 0, -0.0}, {40.0, 0, 40.0}, {3e38, 0, 3e38},  {-3e38, 0, -0.0},
                    {0x1p-126, 0, 0x1p-127}};
    check_specials(&F_GELU, g, COUNT(g));
    const sv d[] = {{QNAN, 0, QNAN}, {INF, 0, 1.0},    {-INF, 0, -0.0},  {0.0, 0, 0.5},     {-0.0, 0, 0.5},
                    {40.0, 0, 1.0},  {-40.0, 0, -0.0}, {3e38, 0, 1.0},   {-3e38, 0, -0.0}};
    check_specials(&F_GELU_GRAD, d, COUNT(d));
    BT_LEAK_CHECK();
}

/* erfc through the subnormal range (x > 9.195 for f32, 26.544 for f64): each result within one
 * unit of the smallest subnormal of the libm value (one rounding), none flushed to 0 early, and
 * exactly 0 past the end of the pieces (10.0625, 27.25). */
Test(math, erfc_subnormal_tail)
{
    mk m;
    mk_build(&m, &F_ERFC, BURNC_DTYPE_F32);
    float x[2048], o[2048];
    int n = 0;
    for (float v = 9.2f; v < 10.2f && n < 2048; v += 0.0005f)
        x[n++] = v;
    mk_run(&m, x, x, o, n);
    for (int i = 0; i < n; i++) {
        float want = (float)erfc((double)x[i]);
        cr_assert(fabsf(o[i] - want) <= 0x1p-149f, "f32 erfc(%a) = %a, expected %a", x[i], o[i], want);
        cr_assert(want == 0.0f || o[i] > 0.0f, "f32 erfc(%a) flushed to 0", x[i]);
        cr_assert(x[i] < 10.0625f || o[i] == 0.0f, "f32 erfc(%a) = %a", x[i], o[i]);
    }
    kir_free(&m.k);
    mk_build(&m, &F_ERFC, BURNC_DTYPE_F64);
    double xd[2048], od[2048];
    n = 0;
    for (double v = 26.55; v < 27.4 && n < 2048; v += 0.000437)
        xd[n++] = v;
    mk_run(&m, xd, xd, od, n);
    for (int i = 0; i < n; i++) {
        double want = (double)erfcl(xd[i]);
        cr_assert(fabs(od[i] - want) <= 0x1p-1074, "f64 erfc(%a) = %a, expected %a", xd[i], od[i], want);
        cr_assert(want == 0.0 || od[i] > 0.0, "f64 erfc(%a) flushed to 0", xd[i]);
        cr_assert(xd[i] < 27.25 || od[i] == 0.0, "f64 erfc(%a) = %a", xd[i], od[i]);
    }
    kir_free(&m.k);
    BT_LEAK_CHECK();
}

/* Sigmoid far in the negative range: e^x down to the subnormals, never 0 too early. */
Test(math, sigmoid_tail)
{
    mk m;
    mk_build(&m, &F_SIGMOID, BURNC_DTYPE_F32);
    float x[3] = {-100.0f, -103.0f, -90.0f}, o[3];
    mk_run(&m, x, x, o, 3);
    for (int i = 0; i < 3; i++)
        cr_assert(o[i] > 0.0f && fabsf(o[i] - (float)exp((double)x[i])) <= 0x1p-149f, "sigmoid(%a) = %a", x[i], o[i]);
    kir_free(&m.k);
    BT_LEAK_CHECK();
}

Test(math, specials_atan2)
{
    const double pi = 3.141592653589793, pi2 = pi / 2, pi4 = pi / 4;
    const sv c[] = {
        {0.0, 1.0, 0.0},        {-0.0, 1.0, -0.0},         {0.0, -1.0, pi},          {-0.0, -1.0, -pi},
        {0.0, 0.0, 0.0},        {-0.0, 0.0, -0.0},         {0.0, -0.0, pi},          {-0.0, -0.0, -pi},
        {1.0, 0.0, pi2},        {-1.0, 0.0, -pi2},         {1.0, -0.0, pi2},         {-1.0, -0.0, -pi2},
        {INF, 1.0, pi2},        {-INF, 1.0, -pi2},         {INF, -1.0, pi2},         {INF, INF, pi4},
        {-INF, INF, -pi4},      {INF, -INF, 3 * pi4},      {-INF, -INF, -3 * pi4},   {1.0, INF, 0.0},
        {-1.0, INF, -0.0},      {1.0, -INF, pi},           {-1.0, -INF, -pi},        {QNAN, 1.0, QNAN},
        {1.0, QNAN, QNAN},      {QNAN, QNAN, QNAN},        {1.0, 1.0, pi4},          {-1.0, -1.0, -3 * pi4},
        {0.0, 1e30, 0.0},       {1e30, 0x1p-149, pi2},     {3e38, 3e38, pi4},        {-3e38, -3e38, -3 * pi4},
    };
    /* atan2(y, x): the kernel's first operand is y */
    check_specials(&F_ATAN2, c, COUNT(c));
    BT_LEAK_CHECK();
}

Test(math, specials_pow)
{
    const sv c[] = {
        {QNAN, 0.0, 1.0},     {QNAN, -0.0, 1.0},   {1.0, QNAN, 1.0},      {1.0, INF, 1.0},
        {-1.0, INF, 1.0},     {-1.0, -INF, 1.0},   {2.0, QNAN, QNAN},     {QNAN, 2.0, QNAN},
        {-2.0, 0.5, QNAN},    {-2.0, 3.0, -8.0},   {-2.0, 2.0, 4.0},      {-2.0, -1.0, -0.5},
        {0.0, -1.0, INF},     {-0.0, -1.0, -INF},  {0.0, -2.0, INF},      {-0.0, -2.0, INF},
        {-0.0, -0.5, INF},    {0.0, 3.0, 0.0},     {-0.0, 3.0, -0.0},     {-0.0, 2.0, 0.0},
        {-0.0, 0.5, 0.0},     {0.0, -INF, INF},    {-0.0, INF, 0.0},      {0.5, -INF, INF},
        {0.5, INF, 0.0},      {2.0, -INF, 0.0},    {2.0, INF, INF},       {-0.5, INF, 0.0},
        {-2.0, INF, INF},     {-INF, -3.0, -0.0},  {-INF, -2.0, 0.0},     {-INF, -0.5, 0.0},
        {-INF, 3.0, -INF},    {-INF, 2.0, INF},    {-INF, 0.5, INF},      {INF, -1.0, 0.0},
        {INF, 0.5, INF},      {2.0, 10.0, 1024.0}, {2.0, -149.0, 0x1p-149}, {10.0, 400.0, INF},
        {10.0, -400.0, 0.0},  {-10.0, 401.0, -INF}, {-10.0, -401.0, -0.0}, {4.0, 0.5, 2.0},
        {-3.0, 1e30, INF},    {-0.5, 1e30, 0.0},   {INF, 0.0, 1.0},       {-1.0, 0x1p60, 1.0},
    };
    check_specials(&F_POW, c, COUNT(c));
    BT_LEAK_CHECK();
}

/* A builder given a non-float value (or nothing) refuses with -1 and emits nothing useful. */
Test(math, bad_operands)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    int32_t i = kir_const_i(&k, KIR_I32, 3);
    int32_t f = kir_const_f(&k, KIR_F32, 1.0);
    int32_t d = kir_const_f(&k, KIR_F64, 1.0);
    unary_fn u[] = {kir_exp, kir_exp2, kir_expm1, kir_log, kir_log2, kir_log1p, kir_sin,
                    kir_cos, kir_tan, kir_tanh, kir_erf, kir_erfc, kir_sigmoid};
    for (size_t j = 0; j < COUNT(u); j++) {
        cr_assert_eq(u[j](&k, i), -1);
        cr_assert_eq(u[j](&k, -1), -1);
        cr_assert_eq(u[j](&k, 1000), -1);
    }
    cr_assert_eq(kir_pow(&k, f, d), -1);
    cr_assert_eq(kir_atan2(&k, f, d), -1);
    cr_assert_eq(kir_pow(&k, i, i), -1);
    cr_assert_eq(kir_atan2(&k, f, -1), -1);
    cr_assert_geq(kir_pow(&k, f, f), 0);
    kir_free(&k);
    BT_LEAK_CHECK();
}
