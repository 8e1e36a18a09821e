/* The kernel IR: building, validity, hashing, the interpreter kir_eval (the oracle of every
 * codegen), the element-wise op builders of ir/kernel_ops.c against ir/scalar.c, reductions in
 * the specified order, and Philox.
 *
 * Exact ops are compared bitwise (NaN matches NaN whatever its payload). Ops built on the math
 * functions of ir/math.c are checked two ways: bitwise against the same composition done on the
 * host around the kernel's own math function (so the composition is exactly scalar.c's), and
 * loosely against ir/scalar.c (so the wiring is right; the accuracy of the math functions is
 * tests/test_math.c's business). */
#include <float.h>
#include <inttypes.h>
#include <stdint.h>

#include "common.h"
#include "ir.h"
#include "kernel.h"
#include "kernel_ops.h"
#include "kernel_io.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- A kernel under test and its launch -------------------------------------------------- */

typedef struct kt {
    kir_kernel k;
    void *in[KIR_MAX_INPUTS];
    void *out[KIR_MAX_OUTPUTS];
    int64_t ext[BURNC_MAX_RANK];
    int64_t in_off[KIR_MAX_INPUTS], in_str[KIR_MAX_INPUTS * BURNC_MAX_RANK];
    int64_t out_off[KIR_MAX_OUTPUTS], out_str[KIR_MAX_OUTPUTS * BURNC_MAX_RANK];
    kir_scalar sc[16];
} kt;

static void kt_init(kt *t, int rank, int n_outer, const int64_t *ext)
{
    memset(t, 0, sizeof *t);
    kir_init(&t->k, rank, n_outer);
    for (int d = 0; d < rank; d++)
        t->ext[d] = ext[d];
}

/* The stride class the value implies (0 broadcast, 1 unit, else any). */
static uint8_t class_of(int64_t s) { return s == 0 ? KIR_STRIDE_ZERO : s == 1 ? KIR_STRIDE_UNIT : KIR_STRIDE_ANY; }

/* Adds an input; strides NULL means dense row-major over the domain. */
static int kt_in(kt *t, burnc_dtype_t dt, const void *data, int64_t off, const int64_t *strides)
{
    int s = t->k.n_inputs++;
    int rank = t->k.rank;
    t->k.inputs[s].dtype = dt;
    t->in[s] = (void *)data;
    t->in_off[s] = off;
    int64_t dense = 1;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t st = strides ? strides[d] : dense;
        dense *= t->ext[d] > 0 ? t->ext[d] : 1;
        t->in_str[s * rank + d] = st;
        t->k.inputs[s].stride[d] = class_of(st);
    }
    return s;
}

static int kt_out(kt *t, burnc_dtype_t dt, void *data, int64_t off, const int64_t *strides)
{
    int s = t->k.n_outputs++;
    int rank = t->k.rank;
    t->k.outputs[s].dtype = dt;
    t->out[s] = data;
    t->out_off[s] = off;
    int64_t dense = 1;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t st = strides ? strides[d] : dense;
        dense *= t->ext[d] > 0 ? t->ext[d] : 1;
        t->out_str[s * rank + d] = st;
        t->k.outputs[s].stride[d] = class_of(st);
    }
    return s;
}

static int32_t kt_load(kt *t, int slot)
{
    return kir_emit(&t->k, KIR_LOAD, kir_type_of(t->k.inputs[slot].dtype), slot, -1, -1);
}

static void kt_store(kt *t, int slot, int32_t value, bool row)
{
    t->k.stores[t->k.n_stores++] = (kir_store){.slot = slot, .value = value, .row = row};
}

static int kt_stage(kt *t, kir_combiner c, int32_t value)
{
    t->k.stages[t->k.n_stages] = (kir_stage){.combiner = (uint8_t)c, .value = value};
    return t->k.n_stages++;
}

static int32_t kt_reduced(kt *t, int stage)
{
    kir_combiner c = t->k.stages[stage].combiner;
    kir_type ty = (c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN) ? KIR_I64
                                                                      : t->k.insts[t->k.stages[stage].value].type;
    return kir_emit(&t->k, KIR_REDUCED, ty, stage, -1, -1);
}

static kir_args kt_args(kt *t)
{
    return (kir_args){.inputs = t->in,
                      .outputs = t->out,
                      .extents = t->ext,
                      .in_offsets = t->in_off,
                      .in_strides = t->in_str,
                      .out_offsets = t->out_off,
                      .out_strides = t->out_str,
                      .scalars = t->sc};
}

/* Runs the kernel; it must be valid and succeed. */
static void kt_eval(kt *t)
{
    char why[256];
    bool ok = kir_valid(&t->k, why, sizeof why);
    if (!ok) {
        char *s = kir_print(&t->k);
        cr_log_error("%s", s ? s : "");
        free(s);
    }
    cr_assert(ok, "kernel invalid: %s", why);
    kir_args a = kt_args(t);
    burnc_status_t st = kir_eval(&t->k, &a);
    cr_assert_eq(st, BURNC_OK, "kir_eval: %s: %s", burnc_status_name(st), burnc_error_message());
}

static void kt_free(kt *t) { kir_free(&t->k); }

/* ---- Values ------------------------------------------------------------------------------ */

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static uint64_t f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Element i of a buffer of dt, read back exactly (floats) or as int64. */
static double get_f(const void *buf, burnc_dtype_t dt, int64_t i)
{
    return ir_load_f((const char *)buf + i * (int64_t)ir_dtype_size(dt), dt);
}

static int64_t get_i(const void *buf, burnc_dtype_t dt, int64_t i)
{
    return ir_load_i((const char *)buf + i * (int64_t)ir_dtype_size(dt), dt);
}

/* Two stored elements are the same value: equal bits, or both NaN. */
static bool same_elem(burnc_dtype_t dt, const void *a, const void *b)
{
    if (ir_dtype_is_float(dt) && isnan(ir_load_f(a, dt)) && isnan(ir_load_f(b, dt)))
        return true;
    return memcmp(a, b, ir_dtype_size(dt)) == 0;
}

/* Asserts n elements of dt equal, naming the case on failure. */
static void expect_same(burnc_dtype_t dt, const void *got, const void *want, int64_t n, const char *what,
                        const double *inputs_a, const double *inputs_b)
{
    size_t sz = ir_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        const char *g = (const char *)got + i * (int64_t)sz, *w = (const char *)want + i * (int64_t)sz;
        if (same_elem(dt, g, w))
            continue;
        if (ir_dtype_is_float(dt))
            cr_assert_fail("%s [%lld] (a=%.17g b=%.17g): got %.17g, want %.17g (%s)", what, (long long)i,
                           inputs_a ? inputs_a[i] : 0.0, inputs_b ? inputs_b[i] : 0.0, ir_load_f(g, dt),
                           ir_load_f(w, dt), ir_dtype_name(dt));
        else
            cr_assert_fail("%s [%lld] (a=%.17g b=%.17g): got %lld, want %lld (%s)", what, (long long)i,
                           inputs_a ? inputs_a[i] : 0.0, inputs_b ? inputs_b[i] : 0.0, (long long)ir_load_i(g, dt),
                           (long long)ir_load_i(w, dt), ir_dtype_name(dt));
    }
}

/* A buffer of n elements of dt holding vals (rounded or cast by the store rules). */
static void *make_buf(burnc_dtype_t dt, const double *vals, int64_t n)
{
    size_t sz = ir_dtype_size(dt);
    char *p = calloc((size_t)(n > 0 ? n : 1), sz);
    cr_assert_not_null(p);
    for (int64_t i = 0; vals && i < n; i++)
        ir_store_f(p + i * (int64_t)sz, dt, vals[i]);
    return p;
}

static void *make_buf_i(burnc_dtype_t dt, const int64_t *vals, int64_t n)
{
    size_t sz = ir_dtype_size(dt);
    char *p = calloc((size_t)(n > 0 ? n : 1), sz);
    cr_assert_not_null(p);
    for (int64_t i = 0; i < n; i++)
        ir_store_i(p + i * (int64_t)sz, dt, vals[i]);
    return p;
}

/* A deterministic generator for test data (splitmix64). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double rng_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_next(s) >> 11) * 0x1p-53;
}

static const burnc_dtype_t FLOAT_DTYPES[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
static const burnc_dtype_t INT_DTYPES[] = {BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8};

/* Float inputs: the special values, halves (rounding ties), values near integers, and a
 * spread of magnitudes, each with both signs. */
static int float_sweep(double *out, int cap)
{
    static const double base[] = {0.0,     1.0,     0.5,     1.5,       2.5,      3.5,    0.3,    0.7,     2.0,
                                  3.0,     7.25,    1e-3,    1e-30,     1e-300,   1e30,   1e300,  65504.0, 70000.0,
                                  1.0e8,   123.456, 0.999,   1.0000001, 4096.5,   1e-40,  5e-324, 3e38,    1.7e308,
                                  INFINITY, NAN,    6.5,     -0.0,      0.1};
    int n = 0;
    for (size_t i = 0; i < COUNT(base) && n + 2 <= cap; i++) {
        out[n++] = base[i];
        out[n++] = -base[i];
    }
    uint64_t s = 42;
    while (n < cap) {
        double m = rng_uniform(&s, -1, 1) * pow(10.0, (double)(int)rng_uniform(&s, -8, 9));
        out[n++] = m;
    }
    return n;
}

/* ---- Types and constants ----------------------------------------------------------------- */

Test(kernel, type_helpers)
{
    cr_assert_eq(kir_type_of(BURNC_DTYPE_F32), KIR_F32);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_F16), KIR_F32);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_BF16), KIR_F32);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_F64), KIR_F64);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_I32), KIR_I32);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_I64), KIR_I64);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_U8), KIR_U8);
    cr_assert_eq(kir_type_of(BURNC_DTYPE_BOOL), KIR_BOOL);
    cr_assert(kir_type_is_float(KIR_F32) && kir_type_is_float(KIR_F64) && kir_type_is_float(KIR_F16) &&
              kir_type_is_float(KIR_BF16));
    cr_assert(!kir_type_is_float(KIR_I32) && !kir_type_is_float(KIR_BOOL) && !kir_type_is_float(KIR_U64));
    cr_assert(kir_type_is_signed(KIR_I32) && kir_type_is_signed(KIR_I64) && kir_type_is_signed(KIR_F32));
    cr_assert(!kir_type_is_signed(KIR_U8) && !kir_type_is_signed(KIR_U32) && !kir_type_is_signed(KIR_U64) &&
              !kir_type_is_signed(KIR_BOOL));
    cr_assert_eq(kir_type_bits(KIR_BOOL), 1);
    cr_assert_eq(kir_type_bits(KIR_U8), 8);
    cr_assert_eq(kir_type_bits(KIR_F16), 16);
    cr_assert_eq(kir_type_bits(KIR_BF16), 16);
    cr_assert_eq(kir_type_bits(KIR_I32), 32);
    cr_assert_eq(kir_type_bits(KIR_U32), 32);
    cr_assert_eq(kir_type_bits(KIR_F32), 32);
    cr_assert_eq(kir_type_bits(KIR_I64), 64);
    cr_assert_eq(kir_type_bits(KIR_U64), 64);
    cr_assert_eq(kir_type_bits(KIR_F64), 64);
    BT_LEAK_CHECK();
}

/* A view's reach into its buffer: negative strides, offsets, empty and overflowing shapes. */
Test(kernel, view_fits_its_buffer)
{
    ir_view v;
    ir_view_dense(&v, 2, (int64_t[]){3, 4});
    cr_assert(ir_view_fits(&v, 4, 48));
    cr_assert_not(ir_view_fits(&v, 4, 47), "the last element ends at byte 48");
    v.offset = 1;
    cr_assert_not(ir_view_fits(&v, 4, 48));
    cr_assert(ir_view_fits(&v, 4, 52));
    /* reversed rows: elements 8..11, 4..7, 0..3 */
    v = (ir_view){.rank = 2, .shape = {3, 4}, .strides = {-4, 1}, .offset = 8};
    cr_assert(ir_view_fits(&v, 4, 48));
    v.offset = 7;
    cr_assert_not(ir_view_fits(&v, 4, 48), "the last row would start at element -1");
    /* a broadcast axis reads one element however long it is */
    v = (ir_view){.rank = 2, .shape = {1000000, 4}, .strides = {0, 1}};
    cr_assert(ir_view_fits(&v, 8, 32));
    /* nothing to read fits anything */
    v = (ir_view){.rank = 2, .shape = {0, 4}, .strides = {4, 1}, .offset = 1000};
    cr_assert(ir_view_fits(&v, 4, 0));
    /* spans that overflow int64 are refused, not wrapped */
    v = (ir_view){.rank = 1, .shape = {INT64_MAX / 2}, .strides = {4}};
    cr_assert_not(ir_view_fits(&v, 4, SIZE_MAX));
    v = (ir_view){.rank = 1, .shape = {3}, .strides = {1}, .offset = INT64_MAX / 4};
    cr_assert_not(ir_view_fits(&v, 8, SIZE_MAX));
}

Test(kernel, constants_are_canonical)
{
    kir_kernel k;
    kir_init(&k, 0, 0);
    int32_t a = kir_const_i(&k, KIR_I32, INT64_C(0x180000005));
    int32_t b = kir_const_i(&k, KIR_U8, -1);
    int32_t c = kir_const_f(&k, KIR_U8, 300.7);
    int32_t d = kir_const_f(&k, KIR_I32, NAN);
    int32_t e = kir_const_f(&k, KIR_F32, 0.1);
    int32_t f = kir_const_f(&k, KIR_I64, 1e300);
    int32_t g = kir_const_i(&k, KIR_F32, (INT64_C(1) << 24) + 1);
    int32_t h = kir_const_f(&k, KIR_BOOL, NAN);
    int32_t i = kir_const_i(&k, KIR_U32, -1);
    int32_t j = kir_const_f(&k, KIR_U64, -5.0);
    cr_assert(a >= 0 && b >= 0 && c >= 0 && d >= 0 && e >= 0 && f >= 0 && g >= 0 && h >= 0 && i >= 0 && j >= 0);
    cr_assert_eq(k.insts[a].imm.i, -2147483643); /* 0x80000005 as i32 */
    cr_assert_eq(k.insts[b].imm.u, 255u);
    cr_assert_eq(k.insts[c].imm.u, 255u);
    cr_assert_eq(k.insts[d].imm.i, 0);
    cr_assert_eq(k.insts[e].imm.f, (double)0.1f);
    cr_assert_eq(k.insts[f].imm.i, INT64_MAX);
    cr_assert_eq(k.insts[g].imm.f, 16777216.0); /* ties to even */
    cr_assert_eq(k.insts[h].imm.u, 1u);
    cr_assert_eq(k.insts[i].imm.u, 0xffffffffu);
    cr_assert_eq(k.insts[j].imm.u, 0u);
    cr_assert_eq(k.insts[a].op, KIR_CONST);
    cr_assert_eq(k.insts[e].type, KIR_F32);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* ---- Element-wise kernels: index maps ---------------------------------------------------- */

/* out = a * b + c over a domain of `rank` axes: a dense, b broadcast on some axes, c read
 * through a transposed (reversed-axes) view with an offset, the output written through a
 * strided view with an offset. */
static void check_index_maps(int rank, const int64_t *ext)
{
    int64_t n = ir_numel(rank, ext);
    int64_t bstr[BURNC_MAX_RANK], cstr[BURNC_MAX_RANK], ostr[BURNC_MAX_RANK];
    /* b: broadcast along even axes, dense over the others */
    int64_t bn = 1;
    for (int d = rank - 1; d >= 0; d--) {
        bstr[d] = d % 2 == 0 ? 0 : bn;
        bn *= d % 2 == 0 ? 1 : ext[d];
    }
    /* c: the domain's transpose, stored column-major, after 3 elements of padding */
    int64_t cs = 1;
    for (int d = 0; d < rank; d++) {
        cstr[d] = cs;
        cs *= ext[d];
    }
    /* out: every element 2 apart, after 5 elements of padding */
    int64_t os = 2;
    for (int d = rank - 1; d >= 0; d--) {
        ostr[d] = os;
        os *= ext[d];
    }
    float *a = calloc((size_t)n + 1, sizeof *a), *b = calloc((size_t)bn + 1, sizeof *b);
    float *c = calloc((size_t)n + 4, sizeof *c), *o = calloc((size_t)(2 * n + 6), sizeof *o);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(i + 1) * 0.5f;
    for (int64_t i = 0; i < bn; i++)
        b[i] = (float)(i % 7) - 3.0f;
    for (int64_t i = 0; i < n + 3; i++)
        c[i] = (float)(i * 3 % 11) * 0.25f;
    for (int64_t i = 0; i < 2 * n + 6; i++)
        o[i] = -99.0f;

    kt t;
    kt_init(&t, rank, rank, ext);
    int ia = kt_in(&t, BURNC_DTYPE_F32, a, 0, NULL);
    int ib = kt_in(&t, BURNC_DTYPE_F32, b, 0, bstr);
    int ic = kt_in(&t, BURNC_DTYPE_F32, c, 3, cstr);
    int oo = kt_out(&t, BURNC_DTYPE_F32, o, 5, ostr);
    int32_t m = kir_emit(&t.k, KIR_MUL, KIR_F32, kt_load(&t, ia), kt_load(&t, ib), -1);
    kt_store(&t, oo, kir_emit(&t.k, KIR_ADD, KIR_F32, m, kt_load(&t, ic), -1), false);
    kt_eval(&t);

    int64_t p[BURNC_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, boff = 0, coff = 3, ooff = 5;
        for (int d = rank - 1; d >= 0; d--) {
            p[d] = rem % ext[d];
            rem /= ext[d];
        }
        for (int d = 0; d < rank; d++) {
            boff += p[d] * bstr[d];
            coff += p[d] * cstr[d];
            ooff += p[d] * ostr[d];
        }
        float prod = a[i] * b[boff];
        float want = prod + c[coff];
        cr_assert_eq(f32_bits(o[ooff]), f32_bits(want), "rank %d, element %lld: got %g, want %g", rank, (long long)i,
                     (double)o[ooff], (double)want);
        o[ooff] = -99.0f;
    }
    for (int64_t i = 0; i < 2 * n + 6; i++)
        cr_assert_eq(o[i], -99.0f, "rank %d: a write outside the output view at %lld", rank, (long long)i);
    kt_free(&t);
    free(a);
    free(b);
    free(c);
    free(o);
}

Test(kernel, elementwise_index_maps_rank_0_to_4)
{
    const int64_t ext[4] = {3, 4, 2, 5};
    for (int rank = 0; rank <= 4; rank++)
        check_index_maps(rank, ext);
    const int64_t ones[4] = {1, 1, 1, 1};
    check_index_maps(4, ones);
    BT_LEAK_CHECK();
}

Test(kernel, size_zero_extent_writes_nothing)
{
    const int64_t ext[2] = {3, 0};
    float a[1] = {1}, o[4] = {-1, -1, -1, -1};
    kt t;
    kt_init(&t, 2, 2, ext);
    int ia = kt_in(&t, BURNC_DTYPE_F32, a, 0, NULL);
    int oo = kt_out(&t, BURNC_DTYPE_F32, o, 0, NULL);
    kt_store(&t, oo, kir_emit(&t.k, KIR_NEG, KIR_F32, kt_load(&t, ia), -1, -1), false);
    kt_eval(&t);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(o[i], -1.0f);
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* Leaves INDEX, EXTENT, ROW_LEN and ARG through a rank-3 kernel with one reduced axis. */
Test(kernel, index_extent_row_len_and_args)
{
    const int64_t ext[3] = {2, 3, 4};
    int64_t o[24], r[6];
    kt t;
    kt_init(&t, 3, 2, ext);
    t.k.n_scalars = 5;
    t.sc[0].i = (INT64_C(1) << 32) + 5; /* i32: wraps to 5 */
    t.sc[1].f = 0.1;                   /* f32: rounded */
    t.sc[2].i = -1;                    /* u8: 255 */
    t.sc[3].i = 2;                     /* bool: true */
    t.sc[4].u = UINT64_MAX;            /* u64 */
    int oo = kt_out(&t, BURNC_DTYPE_I64, o, 0, NULL);
    int orow = kt_out(&t, BURNC_DTYPE_I64, r, 0, (const int64_t[]){3, 1, 0});
    kir_kernel *k = &t.k;
    /* o = i0 * 1000 + i1 * 100 + i2 * 10 + extent2 */
    int32_t v = kir_const_i(k, KIR_I64, 0);
    const int64_t w[3] = {1000, 100, 10};
    for (int d = 0; d < 3; d++) {
        int32_t ix = kir_emit(k, KIR_INDEX, KIR_I64, d, -1, -1);
        v = kir_emit(k, KIR_ADD, KIR_I64, v, kir_emit(k, KIR_MUL, KIR_I64, ix, kir_const_i(k, KIR_I64, w[d]), -1), -1);
    }
    v = kir_emit(k, KIR_ADD, KIR_I64, v, kir_emit(k, KIR_EXTENT, KIR_I64, 2, -1, -1), -1);
    kt_store(&t, oo, v, false);
    /* row store: arg0 (i32 5) + arg1 (f32 0.1 -> bits) ... folded into one i64 */
    int32_t a0 = kir_emit(k, KIR_CONVERT, KIR_I64, kir_emit(k, KIR_ARG, KIR_I32, 0, -1, -1), -1, -1);
    int32_t a1 = kir_emit(k, KIR_CONVERT, KIR_I64,
                          kir_emit(k, KIR_BITCAST, KIR_I32, kir_emit(k, KIR_ARG, KIR_F32, 1, -1, -1), -1, -1), -1, -1);
    int32_t a2 = kir_emit(k, KIR_CONVERT, KIR_I64, kir_emit(k, KIR_ARG, KIR_U8, 2, -1, -1), -1, -1);
    int32_t a3 = kir_emit(k, KIR_CONVERT, KIR_I64, kir_emit(k, KIR_ARG, KIR_BOOL, 3, -1, -1), -1, -1);
    int32_t a4 = kir_emit(k, KIR_BITCAST, KIR_I64, kir_emit(k, KIR_ARG, KIR_U64, 4, -1, -1), -1, -1);
    int32_t rl = kir_emit(k, KIR_ROW_LEN, KIR_I64, -1, -1, -1);
    /* encode: a0 + a2 * 16 + a3 * 65536 + rl * 2^20 + (a1 ^ bits(0.1f)) * 2^24 + (a4 + 1) * 2^40 */
    int32_t enc = a0;
    enc = kir_emit(k, KIR_ADD, KIR_I64, enc, kir_emit(k, KIR_MUL, KIR_I64, a2, kir_const_i(k, KIR_I64, 16), -1), -1);
    enc = kir_emit(k, KIR_ADD, KIR_I64, enc, kir_emit(k, KIR_MUL, KIR_I64, a3, kir_const_i(k, KIR_I64, 65536), -1), -1);
    enc = kir_emit(k, KIR_ADD, KIR_I64, enc,
                   kir_emit(k, KIR_MUL, KIR_I64, rl, kir_const_i(k, KIR_I64, INT64_C(1) << 20), -1), -1);
    int32_t x1 = kir_emit(k, KIR_XOR, KIR_I64, a1, kir_const_i(k, KIR_I64, f32_bits(0.1f)), -1);
    enc = kir_emit(k, KIR_ADD, KIR_I64, enc,
                   kir_emit(k, KIR_MUL, KIR_I64, x1, kir_const_i(k, KIR_I64, INT64_C(1) << 24), -1), -1);
    int32_t x4 = kir_emit(k, KIR_ADD, KIR_I64, a4, kir_const_i(k, KIR_I64, 1), -1);
    enc = kir_emit(k, KIR_ADD, KIR_I64, enc,
                   kir_emit(k, KIR_MUL, KIR_I64, x4, kir_const_i(k, KIR_I64, INT64_C(1) << 40), -1), -1);
    kt_store(&t, orow, enc, true);
    kt_eval(&t);
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 3; i1++) {
            for (int i2 = 0; i2 < 4; i2++)
                cr_assert_eq(o[(i0 * 3 + i1) * 4 + i2], i0 * 1000 + i1 * 100 + i2 * 10 + 4);
            cr_assert_eq(r[i0 * 3 + i1], 5 + 255 * 16 + 65536 + 4 * (1 << 20), "row value %lld",
                         (long long)r[i0 * 3 + i1]);
        }
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* An output that aliases an input with the same index map: every value of a position is
 * computed before its stores. */
Test(kernel, in_place_update)
{
    const int64_t ext[1] = {5};
    float x[5] = {1, 2, 3, 4, 5};
    kt t;
    kt_init(&t, 1, 1, ext);
    int ix = kt_in(&t, BURNC_DTYPE_F32, x, 0, NULL);
    int o0 = kt_out(&t, BURNC_DTYPE_F32, x, 0, NULL);
    int32_t v = kt_load(&t, ix);
    kt_store(&t, o0, kir_emit(&t.k, KIR_MUL, KIR_F32, v, v, -1), false);
    kt_eval(&t);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(x[i], (float)((i + 1) * (i + 1)));
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* ---- f16 / bf16 -------------------------------------------------------------------------- */

/* out = round(round(a * b) + c) in f16/bf16 equals the eager result (each op rounded to the
 * dtype from its exact double value), and the data has cases where skipping the intermediate
 * rounding changes the result, so the test could fail. */
static void check_narrow_chain(burnc_dtype_t dt)
{
    enum { N = 4000 };
    double av[N], bv[N], cv[N];
    uint64_t s = 7;
    for (int i = 0; i < N; i++) {
        av[i] = rng_uniform(&s, -40, 40);
        bv[i] = rng_uniform(&s, -40, 40);
        cv[i] = rng_uniform(&s, -3, 3) * (i % 3 == 0 ? 1e-3 : 1);
    }
    void *a = make_buf(dt, av, N), *b = make_buf(dt, bv, N), *c = make_buf(dt, cv, N);
    void *o = make_buf(dt, NULL, N), *o_raw = make_buf(dt, NULL, N), *want = make_buf(dt, NULL, N);
    kir_type fmt = dt == BURNC_DTYPE_F16 ? KIR_F16 : KIR_BF16;
    const int64_t ext[1] = {N};
    kt t;
    kt_init(&t, 1, 1, ext);
    int ia = kt_in(&t, dt, a, 0, NULL), ib = kt_in(&t, dt, b, 0, NULL), ic = kt_in(&t, dt, c, 0, NULL);
    int oo = kt_out(&t, dt, o, 0, NULL), oraw = kt_out(&t, dt, o_raw, 0, NULL);
    int32_t m = kir_emit(&t.k, KIR_MUL, KIR_F32, kt_load(&t, ia), kt_load(&t, ib), -1);
    int32_t lc = kt_load(&t, ic);
    int32_t sum = kir_emit(&t.k, KIR_ADD, KIR_F32, kir_round(&t.k, m, fmt), lc, -1);
    kt_store(&t, oo, kir_round(&t.k, sum, fmt), false);
    kt_store(&t, oraw, kir_emit(&t.k, KIR_ADD, KIR_F32, m, lc, -1), false); /* no intermediate rounding */
    kt_eval(&t);
    size_t sz = ir_dtype_size(dt);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        char tmp[8];
        ir_store_f(tmp, dt, ir_binary_f(IR_OP_MUL, get_f(a, dt, i), get_f(b, dt, i)));
        ir_store_f((char *)want + i * sz, dt, ir_binary_f(IR_OP_ADD, ir_load_f(tmp, dt), get_f(c, dt, i)));
        differ += memcmp((char *)o_raw + i * sz, (char *)want + i * sz, sz) != 0;
    }
    expect_same(dt, o, want, N, "rounded chain", av, bv);
    cr_assert(differ > 0, "%s: no case where the intermediate rounding matters", ir_dtype_name(dt));
    kt_free(&t);
    free(a), free(b), free(c), free(o), free(o_raw), free(want);
}

Test(kernel, f16_bf16_intermediates_rounded)
{
    check_narrow_chain(BURNC_DTYPE_F16);
    check_narrow_chain(BURNC_DTYPE_BF16);
    BT_LEAK_CHECK();
}

/* KIR_ROUND on the edges: overflow to inf, subnormals, ties, NaN. */
Test(kernel, round_opcode_edges)
{
    const double vals[] = {65504.0, 65519.99, 65520.0, 1e-8, 5.96e-8, 2.98e-8, 1.0 + 0x1p-11, 1.0 + 3 * 0x1p-11,
                           -1.0 - 0x1p-8, 3.4e38, NAN, -INFINITY, -0.0, 1.0 + 0x1p-8 + 0x1p-20};
    enum { N = COUNT(vals) };
    for (int f = 0; f < 2; f++) {
        burnc_dtype_t dt = f ? BURNC_DTYPE_BF16 : BURNC_DTYPE_F16;
        float in[N], out[N];
        for (int i = 0; i < N; i++)
            in[i] = (float)vals[i];
        const int64_t ext[1] = {N};
        kt t;
        kt_init(&t, 1, 1, ext);
        int ii = kt_in(&t, BURNC_DTYPE_F32, in, 0, NULL);
        int oo = kt_out(&t, BURNC_DTYPE_F32, out, 0, NULL);
        kt_store(&t, oo, kir_round(&t.k, kt_load(&t, ii), f ? KIR_BF16 : KIR_F16), false);
        kt_eval(&t);
        for (int i = 0; i < N; i++) {
            char tmp[2];
            ir_store_f(tmp, dt, in[i]);
            double want = ir_load_f(tmp, dt);
            cr_assert((isnan(want) && isnan(out[i])) || f64_bits(want) == f64_bits((double)out[i]),
                      "%s round of %.9g: got %.9g want %.9g", ir_dtype_name(dt), (double)in[i], (double)out[i], want);
        }
        kt_free(&t);
    }
    BT_LEAK_CHECK();
}

/* ---- Element-wise ops of ops.def against ir/scalar.c ------------------------------------- */

static bool bool_result(ir_op op) { return op == IR_OP_LOGICAL_NOT || (op >= IR_OP_EQ && op <= IR_OP_LOGICAL_XOR); }

/* Runs `op` through kir_unary_op_to (b == NULL; as fusion lowers it) or kir_binary_op over n
 * elements of dtype dt,
 * and the same op through ir_unary_x / ir_binary_x with the reference device's conversions;
 * returns both result buffers (of the op's output dtype). */
static void run_op(ir_op op, burnc_dtype_t dt, const void *a, const void *b, int n, const double *scal, void **got,
                   void **want)
{
    burnc_dtype_t rd = bool_result(op) ? BURNC_DTYPE_BOOL : dt;
    kir_type t = kir_type_of(dt);
    *got = make_buf(rd, NULL, n);
    *want = make_buf(rd, NULL, n);
    double conv[2] = {0, 0};
    for (int i = 0; scal && i < 2; i++)
        conv[i] = ir_scalar_to_dtype(scal[i], dt);
    const int64_t ext[1] = {n};
    kt t0;
    kt_init(&t0, 1, 1, ext);
    int ia = kt_in(&t0, dt, a, 0, NULL);
    int ib = b ? kt_in(&t0, dt, b, 0, NULL) : -1;
    int oo = kt_out(&t0, rd, *got, 0, NULL);
    int32_t sc[2] = {kir_const_f(&t0.k, t, conv[0]), kir_const_f(&t0.k, t, conv[1])};
    int32_t v = b ? kir_binary_op(&t0.k, op, t, kt_load(&t0, ia), kt_load(&t0, ib))
                  : kir_unary_op_to(&t0.k, op, t, kt_load(&t0, ia), sc, rd);
    cr_assert(v >= 0, "%s on %s: no instruction", ir_op_name(op), ir_dtype_name(dt));
    kt_store(&t0, oo, v, false);
    kt_eval(&t0);
    kt_free(&t0);
    size_t isz = ir_dtype_size(dt), osz = ir_dtype_size(rd);
    for (int i = 0; i < n; i++) {
        const char *pa = (const char *)a + i * isz, *pb = b ? (const char *)b + i * isz : NULL;
        char *w = (char *)*want + i * osz;
        if (ir_dtype_is_float(dt)) {
            double x = ir_load_f(pa, dt);
            ir_store_f(w, rd, pb ? ir_binary_f(op, x, ir_load_f(pb, dt)) : ir_unary_f(op, x, conv));
        } else {
            int64_t x = ir_load_i(pa, dt);
            ir_store_i(w, rd, pb ? ir_binary_i(op, x, ir_load_i(pb, dt), dt) : ir_unary_i(op, x, dt, conv));
        }
    }
}

/* Every pair (a[i], b[j]) of a list, as two flat buffers of dt. */
static int all_pairs(burnc_dtype_t dt, const double *vals, int n, void **a, void **b, double **av, double **bv)
{
    int m = n * n;
    *av = malloc((size_t)m * sizeof **av);
    *bv = malloc((size_t)m * sizeof **bv);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            (*av)[i * n + j] = vals[i];
            (*bv)[i * n + j] = vals[j];
        }
    *a = make_buf(dt, *av, m);
    *b = make_buf(dt, *bv, m);
    for (int i = 0; i < m; i++) { /* the values as dt holds them, for messages */
        (*av)[i] = get_f(*a, dt, i);
        (*bv)[i] = get_f(*b, dt, i);
    }
    return m;
}

static const ir_op EXACT_UNARY[] = {IR_OP_NEG,  IR_OP_ABS,   IR_OP_SIGN,  IR_OP_SQRT,        IR_OP_RECIPROCAL, IR_OP_RELU,
                                    IR_OP_FLOOR, IR_OP_CEIL, IR_OP_ROUND, IR_OP_LOGICAL_NOT, IR_OP_CAST,       IR_OP_CLAMP};
static const ir_op EXACT_BINARY[] = {IR_OP_ADD, IR_OP_SUB,         IR_OP_MUL,        IR_OP_DIV,        IR_OP_MAXIMUM,
                                     IR_OP_MINIMUM, IR_OP_REMAINDER, IR_OP_EQ,       IR_OP_NE,         IR_OP_LT,
                                     IR_OP_LE,  IR_OP_GT,          IR_OP_GE,         IR_OP_LOGICAL_AND, IR_OP_LOGICAL_OR,
                                     IR_OP_LOGICAL_XOR};

/* Exact ops in f32 and f16/bf16 (computed in f32) equal the double result rounded once to the
 * dtype; in f64 they equal it outright. Clamp runs with ordinary, inverted and NaN bounds. */
Test(kernel_ops, exact_float_ops_bitwise)
{
    double vals[96];
    int nv = float_sweep(vals, 96);
    const double clamps[][2] = {{-2.5, 3.0}, {5.0, -5.0}, {-INFINITY, 0.0}, {NAN, 1.0}};
    for (size_t d = 0; d < COUNT(FLOAT_DTYPES); d++) {
        burnc_dtype_t dt = FLOAT_DTYPES[d];
        void *a = make_buf(dt, vals, nv);
        for (size_t o = 0; o < COUNT(EXACT_UNARY); o++) {
            size_t reps = EXACT_UNARY[o] == IR_OP_CLAMP ? COUNT(clamps) : 1;
            for (size_t r = 0; r < reps; r++) {
                void *got, *want;
                run_op(EXACT_UNARY[o], dt, a, NULL, nv, clamps[r], &got, &want);
                char what[64];
                snprintf(what, sizeof what, "%s %s", ir_op_name(EXACT_UNARY[o]), ir_dtype_name(dt));
                expect_same(bool_result(EXACT_UNARY[o]) ? BURNC_DTYPE_BOOL : dt, got, want, nv, what, vals, NULL);
                free(got);
                free(want);
            }
        }
        free(a);
        void *pa, *pb;
        double *av, *bv;
        int m = all_pairs(dt, vals, 64, &pa, &pb, &av, &bv);
        for (size_t o = 0; o < COUNT(EXACT_BINARY); o++) {
            void *got, *want;
            run_op(EXACT_BINARY[o], dt, pa, pb, m, NULL, &got, &want);
            char what[64];
            snprintf(what, sizeof what, "%s %s", ir_op_name(EXACT_BINARY[o]), ir_dtype_name(dt));
            expect_same(bool_result(EXACT_BINARY[o]) ? BURNC_DTYPE_BOOL : dt, got, want, m, what, av, bv);
            free(got);
            free(want);
        }
        free(pa), free(pb), free(av), free(bv);
    }
    BT_LEAK_CHECK();
}

static const ir_op INT_UNARY[] = {IR_OP_NEG,  IR_OP_ABS,   IR_OP_SIGN,        IR_OP_RELU, IR_OP_FLOOR,
                                  IR_OP_CEIL, IR_OP_ROUND, IR_OP_LOGICAL_NOT, IR_OP_CAST, IR_OP_CLAMP};
static const ir_op INT_BINARY[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_POW, IR_OP_MAXIMUM,
                                   IR_OP_MINIMUM, IR_OP_REMAINDER, IR_OP_EQ, IR_OP_NE, IR_OP_LT, IR_OP_LE,
                                   IR_OP_GT, IR_OP_GE, IR_OP_LOGICAL_AND, IR_OP_LOGICAL_OR, IR_OP_LOGICAL_XOR};

/* The edge values of an integer dtype, as int64. */
static int int_edges(burnc_dtype_t dt, int64_t *out)
{
    static const int64_t common[] = {0, 1, 2, 3, 5, 7, 31, 32, 33, 63, 64, 100, 127, 128, 200, 254, 255};
    int n = 0;
    for (size_t i = 0; i < COUNT(common); i++)
        out[n++] = common[i];
    if (dt == BURNC_DTYPE_U8)
        return n;
    const int64_t neg[] = {-1, -2, -3, -7, -100, 65536, 46341, -46341};
    for (size_t i = 0; i < COUNT(neg); i++)
        out[n++] = neg[i];
    if (dt == BURNC_DTYPE_I32) {
        const int64_t e[] = {INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1};
        for (size_t i = 0; i < COUNT(e); i++)
            out[n++] = e[i];
    } else {
        const int64_t e[] = {INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, INT64_C(1) << 32, INT64_C(3037000500)};
        for (size_t i = 0; i < COUNT(e); i++)
            out[n++] = e[i];
    }
    return n;
}

/* Every integer op on every pair of edge values (pow with negative, huge and zero exponents,
 * division by 0 and -1, the minimum's negation) equals ir_unary_i / ir_binary_i wrapped to
 * the dtype. Bool runs the ops that take it. */
Test(kernel_ops, integer_ops_match_scalar)
{
    for (size_t d = 0; d < COUNT(INT_DTYPES) + 1; d++) {
        burnc_dtype_t dt = d < COUNT(INT_DTYPES) ? INT_DTYPES[d] : BURNC_DTYPE_BOOL;
        int64_t ev[64];
        int ne = dt == BURNC_DTYPE_BOOL ? 2 : int_edges(dt, ev);
        if (dt == BURNC_DTYPE_BOOL)
            ev[0] = 0, ev[1] = 1;
        void *a = make_buf_i(dt, ev, ne);
        double evd[64];
        for (int i = 0; i < ne; i++)
            evd[i] = (double)get_i(a, dt, i);
        const double clamps[][2] = {{-5, 100}, {100, -5}, {-1e30, 1e30}, {3, 3}};
        for (size_t o = 0; o < COUNT(INT_UNARY); o++) {
            ir_op op = INT_UNARY[o];
            if (dt == BURNC_DTYPE_BOOL && op != IR_OP_LOGICAL_NOT && op != IR_OP_CAST)
                continue;
            size_t reps = op == IR_OP_CLAMP ? COUNT(clamps) : 1;
            for (size_t r = 0; r < reps; r++) {
                void *got, *want;
                run_op(op, dt, a, NULL, ne, clamps[r], &got, &want);
                char what[64];
                snprintf(what, sizeof what, "%s %s", ir_op_name(op), ir_dtype_name(dt));
                expect_same(bool_result(op) ? BURNC_DTYPE_BOOL : dt, got, want, ne, what, evd, NULL);
                free(got);
                free(want);
            }
        }
        int m = ne * ne;
        int64_t *pav = malloc((size_t)m * sizeof *pav), *pbv = malloc((size_t)m * sizeof *pbv);
        double *av = malloc((size_t)m * sizeof *av), *bv = malloc((size_t)m * sizeof *bv);
        for (int i = 0; i < m; i++) {
            pav[i] = ev[i / ne];
            pbv[i] = ev[i % ne];
            av[i] = evd[i / ne];
            bv[i] = evd[i % ne];
        }
        void *pa = make_buf_i(dt, pav, m), *pb = make_buf_i(dt, pbv, m);
        for (size_t o = 0; o < COUNT(INT_BINARY); o++) {
            ir_op op = INT_BINARY[o];
            if (dt == BURNC_DTYPE_BOOL && !bool_result(op))
                continue;
            void *got, *want;
            run_op(op, dt, pa, pb, m, NULL, &got, &want);
            char what[64];
            snprintf(what, sizeof what, "%s %s", ir_op_name(op), ir_dtype_name(dt));
            expect_same(bool_result(op) ? BURNC_DTYPE_BOOL : dt, got, want, m, what, av, bv);
            free(got);
            free(want);
        }
        free(a), free(pa), free(pb), free(pav), free(pbv), free(av), free(bv);
    }
    BT_LEAK_CHECK();
}

/* Ops the recorder never builds for a dtype are refused with -1 (and so fail kir_valid). */
Test(kernel_ops, meaningless_requests_give_minus_one)
{
    kir_kernel k;
    kir_init(&k, 0, 0);
    int32_t xi = kir_const_i(&k, KIR_I32, 3), xb = kir_const_i(&k, KIR_BOOL, 1);
    cr_assert_eq(kir_unary_op(&k, IR_OP_EXP, KIR_I32, xi, NULL), -1);
    cr_assert_eq(kir_unary_op(&k, IR_OP_NEG, KIR_BOOL, xb, NULL), -1);
    cr_assert_eq(kir_unary_op(&k, IR_OP_CLAMP, KIR_I32, xi, NULL), -1);
    cr_assert_eq(kir_binary_op(&k, IR_OP_ATAN2, KIR_I32, xi, xi), -1);
    cr_assert_eq(kir_binary_op(&k, IR_OP_ADD, KIR_BOOL, xb, xb), -1);
    cr_assert_eq(kir_binary_op(&k, IR_OP_SUM, KIR_I32, xi, xi), -1);
    cr_assert_eq(kir_philox(&k, xi, xi, 4), -1);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* Every cast between the eight dtypes, lowered the way the header allows (a store rounds once
 * to f16/bf16 from f32, f64 or an integer; anything else is a CONVERT to the slot's value type
 * first), equals the reference device's element conversion. */
static bool store_takes(kir_type vt, burnc_dtype_t dst)
{
    if (vt == kir_type_of(dst))
        return true;
    bool narrow = dst == BURNC_DTYPE_F16 || dst == BURNC_DTYPE_BF16;
    return narrow && vt != KIR_BOOL;
}

Test(kernel_ops, cast_matrix)
{
    static const burnc_dtype_t ALL[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                        BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8,  BURNC_DTYPE_BOOL};
    double fv[80];
    int nf = float_sweep(fv, 80);
    fv[nf - 1] = 9.3e18, fv[nf - 2] = -9.3e18, fv[nf - 3] = 4294967296.5, fv[nf - 4] = 255.9, fv[nf - 5] = -0.9;
    int64_t iv[64];
    int ni = int_edges(BURNC_DTYPE_I64, iv);
    iv[ni++] = (INT64_C(1) << 30) + (INT64_C(1) << 22) + 1; /* rounds differently through f32 to bf16 */
    iv[ni++] = (INT64_C(1) << 53) + 1;
    iv[ni++] = 65519;
    for (size_t s = 0; s < COUNT(ALL); s++)
        for (size_t d = 0; d < COUNT(ALL); d++) {
            burnc_dtype_t src = ALL[s], dst = ALL[d];
            bool fsrc = ir_dtype_is_float(src);
            int n = fsrc ? nf : ni;
            void *in = fsrc ? make_buf(src, fv, n) : make_buf_i(src, iv, n);
            void *got = make_buf(dst, NULL, n), *want = make_buf(dst, NULL, n);
            const int64_t ext[1] = {n};
            kt t;
            kt_init(&t, 1, 1, ext);
            int ii = kt_in(&t, src, in, 0, NULL), oo = kt_out(&t, dst, got, 0, NULL);
            int32_t v = kir_unary_op(&t.k, IR_OP_CAST, kir_type_of(src), kt_load(&t, ii), NULL);
            if (!store_takes(kir_type_of(src), dst))
                v = kir_emit(&t.k, KIR_CONVERT, kir_type_of(dst), v, -1, -1);
            kt_store(&t, oo, v, false);
            kt_eval(&t);
            kt_free(&t);
            size_t ss = ir_dtype_size(src), ds = ir_dtype_size(dst);
            for (int i = 0; i < n; i++) {
                const char *p = (const char *)in + i * ss;
                char *w = (char *)want + i * ds;
                if (fsrc)
                    ir_store_f(w, dst, ir_load_f(p, src));
                else
                    ir_store_i(w, dst, ir_load_i(p, src));
            }
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", ir_dtype_name(src), ir_dtype_name(dst));
            expect_same(dst, got, want, n, what, NULL, NULL);
            free(in), free(got), free(want);
        }
    BT_LEAK_CHECK();
}

/* ---- Raw opcodes ------------------------------------------------------------------------- */

/* Runs `op` of type t (result type rt) over n pairs given as int64 bit patterns; the operands
 * reach t by a wrapping CONVERT from I64 and the result leaves by BITCAST/CONVERT to I64. */
static void int_opcode(kir_opcode op, kir_type t, kir_type rt, const int64_t *a, const int64_t *b, int n, int64_t *out)
{
    const int64_t ext[1] = {n};
    kt k0;
    kt_init(&k0, 1, 1, ext);
    int ia = kt_in(&k0, BURNC_DTYPE_I64, a, 0, NULL), ib = kt_in(&k0, BURNC_DTYPE_I64, b, 0, NULL);
    int oo = kt_out(&k0, BURNC_DTYPE_I64, out, 0, NULL);
    kir_kernel *k = &k0.k;
    int32_t x = kir_emit(k, KIR_CONVERT, t, kt_load(&k0, ia), -1, -1);
    int32_t y = kir_emit(k, KIR_CONVERT, t, kt_load(&k0, ib), -1, -1);
    int32_t r = kir_emit(k, op, rt, x, y, -1);
    if (op == KIR_NOT || op == KIR_NEG || op == KIR_ABS)
        r = kir_emit(k, op, rt, x, -1, -1);
    kt_store(&k0, oo, kir_emit(k, KIR_CONVERT, KIR_I64, r, -1, -1), false);
    kt_eval(&k0);
    kt_free(&k0);
}

/* One integer opcode on one pair equals `want` (as the I64 the result converts to). */
static void expect_int(kir_opcode op, kir_type t, int64_t a, int64_t b, int64_t want)
{
    int64_t out = 0;
    kir_type rt = (op >= KIR_EQ && op <= KIR_GE) ? KIR_BOOL : t;
    int_opcode(op, t, rt, &a, &b, 1, &out);
    cr_assert_eq(out, want, "opcode %d type %d on (%lld, %lld): got %lld (0x%llx), want %lld", op, t, (long long)a,
                 (long long)b, (long long)out, (unsigned long long)out, (long long)want);
}

Test(kernel_eval, integer_opcodes)
{
    /* wrapping */
    expect_int(KIR_ADD, KIR_U8, 200, 100, 44);
    expect_int(KIR_ADD, KIR_I32, INT32_MAX, 1, INT32_MIN);
    expect_int(KIR_SUB, KIR_U32, 0, 1, UINT32_MAX);
    expect_int(KIR_MUL, KIR_I32, 65536, 65536, 0);
    expect_int(KIR_MUL, KIR_I64, INT64_MIN, -1, INT64_MIN);
    expect_int(KIR_NEG, KIR_I32, INT32_MIN, 0, INT32_MIN);
    expect_int(KIR_NEG, KIR_U8, 1, 0, 255);
    expect_int(KIR_ABS, KIR_I64, INT64_MIN, 0, INT64_MIN);
    expect_int(KIR_ABS, KIR_I32, -5, 0, 5);
    expect_int(KIR_ABS, KIR_U32, -5, 0, UINT32_MAX - 4);
    /* floor division and remainder, zero divisor, the minimum over -1 */
    expect_int(KIR_DIV, KIR_I32, -7, 2, -4);
    expect_int(KIR_REM, KIR_I32, -7, 2, 1);
    expect_int(KIR_DIV, KIR_I32, 7, -2, -4);
    expect_int(KIR_REM, KIR_I32, 7, -2, -1);
    expect_int(KIR_DIV, KIR_I64, -6, 3, -2);
    expect_int(KIR_REM, KIR_I64, -6, 3, 0);
    expect_int(KIR_DIV, KIR_I32, 5, 0, 0);
    expect_int(KIR_REM, KIR_I32, 5, 0, 0);
    expect_int(KIR_DIV, KIR_I32, INT32_MIN, -1, INT32_MIN);
    expect_int(KIR_REM, KIR_I32, INT32_MIN, -1, 0);
    expect_int(KIR_DIV, KIR_I64, INT64_MIN, -1, INT64_MIN);
    expect_int(KIR_REM, KIR_I64, INT64_MIN, -1, 0);
    expect_int(KIR_DIV, KIR_U32, -1, 2, 0x7fffffff); /* unsigned: 4294967295 / 2 */
    expect_int(KIR_REM, KIR_U64, -1, 10, 5);           /* 18446744073709551615 % 10 */
    expect_int(KIR_DIV, KIR_U64, 7, 0, 0);
    expect_int(KIR_REM, KIR_U8, 255, 0, 0);
    /* high halves */
    expect_int(KIR_MULHI, KIR_U32, 0xD2511F53, 0xffffffff, 0xD2511F52);
    expect_int(KIR_MULHI, KIR_U64, -1, -1, -2); /* (2^64-1)^2 >> 64 = 2^64 - 2 */
    expect_int(KIR_MULHI, KIR_U64, INT64_C(0x123456789abcdef0), INT64_C(0x0fedcba987654321),
               INT64_C(0x0121fa00ad77d742));
    /* shifts: counts modulo the width, arithmetic for signed, logical for unsigned */
    expect_int(KIR_SHL, KIR_I32, 1, 31, INT32_MIN);
    expect_int(KIR_SHL, KIR_I32, 1, 32, 1);
    expect_int(KIR_SHL, KIR_I32, 3, 33, 6);
    expect_int(KIR_SHL, KIR_U8, 0x81, 1, 2);
    expect_int(KIR_SHL, KIR_U8, 1, 9, 2);
    expect_int(KIR_SHR, KIR_I32, -8, 1, -4);
    expect_int(KIR_SHR, KIR_I32, -1, 31, -1);
    expect_int(KIR_SHR, KIR_I32, -8, -1, -1); /* count 31 */
    expect_int(KIR_SHR, KIR_U32, -8, 1, 0x7ffffffc);
    expect_int(KIR_SHR, KIR_I64, INT64_MIN, 63, -1);
    expect_int(KIR_SHR, KIR_U64, INT64_MIN, 63, 1);
    expect_int(KIR_SHR, KIR_U64, 12, 64, 12);
    /* bits */
    expect_int(KIR_AND, KIR_U8, 0xf0, 0x3c, 0x30);
    expect_int(KIR_OR, KIR_I32, -16, 3, -13);
    expect_int(KIR_XOR, KIR_U32, -1, 0xff, 0xffffff00);
    expect_int(KIR_NOT, KIR_I32, 0, 0, -1);
    expect_int(KIR_NOT, KIR_U8, 0x0f, 0, 0xf0);
    expect_int(KIR_NOT, KIR_BOOL, 1, 0, 0);
    expect_int(KIR_NOT, KIR_BOOL, 5, 0, 0); /* converted to bool first: true */
    /* comparisons: signed vs unsigned order */
    expect_int(KIR_LT, KIR_I64, -1, 1, 1);
    expect_int(KIR_LT, KIR_U64, -1, 1, 0);
    expect_int(KIR_GE, KIR_U32, 0x80000000, 1, 1);
    expect_int(KIR_GT, KIR_I32, 0x80000000, 1, 0); /* wraps to INT32_MIN */
    expect_int(KIR_EQ, KIR_U8, 256 + 7, 7, 1);
    expect_int(KIR_NE, KIR_BOOL, 2, 1, 0);
    expect_int(KIR_LE, KIR_BOOL, 1, 0, 0);
    BT_LEAK_CHECK();
}

/* A one-instruction f32/f64 kernel over arrays: result as double. */
static void float_opcode(kir_opcode op, kir_type t, const double *a, const double *b, const double *c, int n, double *out)
{
    burnc_dtype_t dt = t == KIR_F32 ? BURNC_DTYPE_F32 : BURNC_DTYPE_F64;
    void *pa = make_buf(dt, a, n), *pb = make_buf(dt, b ? b : a, n), *pc = make_buf(dt, c ? c : a, n);
    void *po = make_buf(BURNC_DTYPE_F64, NULL, n);
    const int64_t ext[1] = {n};
    kt k0;
    kt_init(&k0, 1, 1, ext);
    int ia = kt_in(&k0, dt, pa, 0, NULL), ib = kt_in(&k0, dt, pb, 0, NULL), ic = kt_in(&k0, dt, pc, 0, NULL);
    int oo = kt_out(&k0, BURNC_DTYPE_F64, po, 0, NULL);
    int32_t r;
    if (op == KIR_FMA)
        r = kir_emit(&k0.k, op, t, kt_load(&k0, ia), kt_load(&k0, ib), kt_load(&k0, ic));
    else if (b)
        r = kir_emit(&k0.k, op, t, kt_load(&k0, ia), kt_load(&k0, ib), -1);
    else
        r = kir_emit(&k0.k, op, t, kt_load(&k0, ia), -1, -1);
    kt_store(&k0, oo, t == KIR_F64 ? r : kir_emit(&k0.k, KIR_CONVERT, KIR_F64, r, -1, -1), false);
    kt_eval(&k0);
    kt_free(&k0);
    for (int i = 0; i < n; i++)
        out[i] = get_f(po, BURNC_DTYPE_F64, i);
    free(pa), free(pb), free(pc), free(po);
}

static void expect_bits(double got, double want, const char *what, double x)
{
    cr_assert((isnan(got) && isnan(want)) || f64_bits(got) == f64_bits(want), "%s(%.17g): got %.17g, want %.17g",
              what, x, got, want);
}

Test(kernel_eval, float_opcodes)
{
    const double x[] = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.3, 0.49999997, 8388607.5, -8388609.0, 1e30, -0.0, INFINITY,
                        NAN, 4503599627370495.5, 1e-310};
    enum { N = COUNT(x) };
    double out[N];
    for (int f = 0; f < 2; f++) {
        kir_type t = f ? KIR_F64 : KIR_F32;
        float_opcode(KIR_RINT, t, x, NULL, NULL, N, out);
        for (int i = 0; i < N; i++) {
            double xi = f ? x[i] : (double)(float)x[i];
            /* round half to even: the sign of a zero result follows x */
            double r = floor(xi), fr = xi - r;
            if (fr > 0.5 || (fr == 0.5 && fmod(r, 2.0) != 0))
                r += 1;
            expect_bits(out[i], isinf(xi) || isnan(xi) ? xi : copysign(r, xi), "rint", xi);
        }
        float_opcode(KIR_FLOOR, t, x, NULL, NULL, N, out);
        for (int i = 0; i < N; i++)
            expect_bits(out[i], floor(f ? x[i] : (float)x[i]), "floor", x[i]);
        float_opcode(KIR_CEIL, t, x, NULL, NULL, N, out);
        for (int i = 0; i < N; i++)
            expect_bits(out[i], ceil(f ? x[i] : (float)x[i]), "ceil", x[i]);
        float_opcode(KIR_TRUNC, t, x, NULL, NULL, N, out);
        for (int i = 0; i < N; i++)
            expect_bits(out[i], trunc(f ? x[i] : (float)x[i]), "trunc", x[i]);
    }
    /* -0.5 rounds to -0, 2.5 to 2 */
    cr_assert(signbit(out[3]) && out[3] == 0 && out[2] == 2.0);

    /* FMA rounds once; MUL then ADD twice */
    const double fa[] = {1.0 + 0x1p-12}, fc[] = {-(1.0 + 0x1p-11)};
    double r1, r2;
    float_opcode(KIR_FMA, KIR_F32, fa, fa, fc, 1, &r1);
    cr_assert_eq(r1, 0x1p-24);
    float_opcode(KIR_MUL, KIR_F32, fa, fa, NULL, 1, &r2);
    cr_assert_eq(r2, 1.0 + 0x1p-11, "f32 mul must round in f32: %.17g", r2);
    const double da[] = {1.0 + 0x1p-30}, dc[] = {-(1.0 + 0x1p-29)};
    float_opcode(KIR_FMA, KIR_F64, da, da, dc, 1, &r1);
    cr_assert_eq(r1, 0x1p-60);

    /* f32 division and sqrt round in f32 (not in double then again) */
    const double num[] = {1.0, 2.0, 10.0}, den[] = {3.0, 3.0, 7.0};
    double q[3];
    float_opcode(KIR_DIV, KIR_F32, num, den, NULL, 3, q);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(q[i], (double)((float)num[i] / (float)den[i]));
    float_opcode(KIR_SQRT, KIR_F32, den, NULL, NULL, 3, q);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(q[i], (double)sqrtf((float)den[i]));
    /* REM is C's fmod; NaN compares false except NE */
    const double ra[] = {-7.5, 7.5, 1e30}, rb[] = {2.0, -2.0, 3.0};
    float_opcode(KIR_REM, KIR_F64, ra, rb, NULL, 3, q);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(q[i], fmod(ra[i], rb[i]));
    BT_LEAK_CHECK();
}

/* CONVERT and BITCAST between the value types, including the unsigned ones. */
static int64_t convert_case(kir_type from, kir_type to, kir_scalar v, kir_opcode op)
{
    kt k0;
    kt_init(&k0, 0, 0, NULL);
    int64_t out = 0;
    k0.k.n_scalars = 1;
    k0.sc[0] = v;
    int oo = kt_out(&k0, BURNC_DTYPE_I64, &out, 0, NULL);
    int32_t x = kir_emit(&k0.k, KIR_ARG, from, 0, -1, -1);
    int32_t r = kir_emit(&k0.k, op, to, x, -1, -1);
    if (to == KIR_F32)
        r = kir_emit(&k0.k, KIR_BITCAST, KIR_I32, r, -1, -1);
    else if (to == KIR_F64)
        r = kir_emit(&k0.k, KIR_BITCAST, KIR_I64, r, -1, -1);
    kt_store(&k0, oo, to == KIR_I64 || to == KIR_F64 ? r : kir_emit(&k0.k, KIR_CONVERT, KIR_I64, r, -1, -1), false);
    kt_eval(&k0);
    kt_free(&k0);
    return out;
}

static kir_scalar sf(double f) { return (kir_scalar){.f = f}; }
static kir_scalar si(int64_t i) { return (kir_scalar){.i = i}; }

Test(kernel_eval, convert_and_bitcast)
{
    cr_assert_eq(convert_case(KIR_F32, KIR_U32, sf(-1.0), KIR_CONVERT), 0);
    cr_assert_eq(convert_case(KIR_F32, KIR_U32, sf(5e9), KIR_CONVERT), UINT32_MAX);
    cr_assert_eq(convert_case(KIR_F64, KIR_U32, sf(4294967295.9), KIR_CONVERT), UINT32_MAX);
    cr_assert_eq(convert_case(KIR_F64, KIR_U64, sf(1.9e19), KIR_CONVERT), -1); /* UINT64_MAX */
    cr_assert_eq(convert_case(KIR_F64, KIR_U64, sf(1.5e19), KIR_CONVERT), (int64_t)(UINT64_C(15000000000000000000) - UINT64_C(18446744073709551615) - 1));
    cr_assert_eq(convert_case(KIR_F64, KIR_I64, sf(-1e19), KIR_CONVERT), INT64_MIN);
    cr_assert_eq(convert_case(KIR_F32, KIR_I32, sf(NAN), KIR_CONVERT), 0);
    cr_assert_eq(convert_case(KIR_F32, KIR_I32, sf(-2.9), KIR_CONVERT), -2);
    cr_assert_eq(convert_case(KIR_F32, KIR_U8, sf(-2.9), KIR_CONVERT), 0);
    cr_assert_eq(convert_case(KIR_F64, KIR_U8, sf(255.99), KIR_CONVERT), 255);
    cr_assert_eq(convert_case(KIR_F64, KIR_BOOL, sf(NAN), KIR_CONVERT), 1);
    cr_assert_eq(convert_case(KIR_F64, KIR_BOOL, sf(-0.0), KIR_CONVERT), 0);
    cr_assert_eq(convert_case(KIR_U64, KIR_F32, si(-1), KIR_CONVERT), f32_bits(0x1p64f));
    cr_assert_eq(convert_case(KIR_U64, KIR_F64, si(-1), KIR_CONVERT), (int64_t)f64_bits(0x1p64));
    cr_assert_eq(convert_case(KIR_I64, KIR_F32, si((INT64_C(1) << 24) + 1), KIR_CONVERT), f32_bits(16777216.0f));
    cr_assert_eq(convert_case(KIR_I64, KIR_F32, si((INT64_C(1) << 24) + 3), KIR_CONVERT), f32_bits(16777220.0f));
    cr_assert_eq(convert_case(KIR_I64, KIR_F64, si(INT64_MAX), KIR_CONVERT), (int64_t)f64_bits(0x1p63));
    cr_assert_eq(convert_case(KIR_U32, KIR_I32, si(0x80000000), KIR_CONVERT), INT32_MIN);
    cr_assert_eq(convert_case(KIR_I32, KIR_U64, si(-1), KIR_CONVERT), -1);
    cr_assert_eq(convert_case(KIR_I32, KIR_U8, si(-1), KIR_CONVERT), 255);
    cr_assert_eq(convert_case(KIR_BOOL, KIR_F64, si(7), KIR_CONVERT), (int64_t)f64_bits(1.0));
    cr_assert_eq(convert_case(KIR_F64, KIR_F32, sf(1.0 + 0x1p-24 + 0x1p-50), KIR_CONVERT), f32_bits(1.0f + 0x1p-23f));
    cr_assert_eq(convert_case(KIR_F32, KIR_I32, sf(-1.0), KIR_BITCAST), (int32_t)0xbf800000u);
    cr_assert_eq(convert_case(KIR_F32, KIR_U32, sf(-1.0), KIR_BITCAST), 0xbf800000u);
    cr_assert_eq(convert_case(KIR_F64, KIR_U64, sf(-2.0), KIR_BITCAST), (int64_t)f64_bits(-2.0));
    cr_assert_eq(convert_case(KIR_I64, KIR_F64, si((int64_t)f64_bits(0.75)), KIR_BITCAST), (int64_t)f64_bits(0.75));
    cr_assert_eq(convert_case(KIR_U32, KIR_F32, si(0x3f800000), KIR_BITCAST), 0x3f800000);
    cr_assert_eq(convert_case(KIR_I32, KIR_U32, si(-2), KIR_BITCAST), 0xfffffffe);
    BT_LEAK_CHECK();
}

/* ---- Ops built on the math functions ----------------------------------------------------- */

typedef int32_t (*math1_fn)(kir_kernel *, int32_t);
typedef int32_t (*math2_fn)(kir_kernel *, int32_t, int32_t);

/* fn (or fn2 when b is given) of kernel.h's math over n values of type t (f32 values are
 * rounded to f32 first); results as double. */
static void eval_math(math1_fn fn, math2_fn fn2, kir_type t, const double *a, const double *b, int n, double *out)
{
    burnc_dtype_t dt = t == KIR_F32 ? BURNC_DTYPE_F32 : BURNC_DTYPE_F64;
    void *pa = make_buf(dt, a, n), *pb = make_buf(dt, b ? b : a, n), *po = make_buf(dt, NULL, n);
    const int64_t ext[1] = {n};
    kt k0;
    kt_init(&k0, 1, 1, ext);
    int ia = kt_in(&k0, dt, pa, 0, NULL), ib = kt_in(&k0, dt, pb, 0, NULL), oo = kt_out(&k0, dt, po, 0, NULL);
    int32_t r = fn2 ? fn2(&k0.k, kt_load(&k0, ia), kt_load(&k0, ib)) : fn(&k0.k, kt_load(&k0, ia));
    kt_store(&k0, oo, r, false);
    kt_eval(&k0);
    kt_free(&k0);
    for (int i = 0; i < n; i++)
        out[i] = get_f(po, dt, i);
    free(pa), free(pb), free(po);
}

/* kir_unary_op / kir_binary_op of op over n values of dtype dt; results as double. */
static void eval_op(ir_op op, burnc_dtype_t dt, const double *a, const double *b, int n, double *out)
{
    void *pa = make_buf(dt, a, n), *pb = b ? make_buf(dt, b, n) : NULL, *got, *want;
    run_op(op, dt, pa, pb, n, NULL, &got, &want);
    for (int i = 0; i < n; i++)
        out[i] = get_f(got, dt, i);
    free(pa), free(pb), free(got), free(want);
}

static const struct {
    ir_op op;
    math1_fn fn;
} DIRECT_MATH[] = {
    {IR_OP_EXP, kir_exp},   {IR_OP_EXP2, kir_exp2}, {IR_OP_EXPM1, kir_expm1}, {IR_OP_LOG, kir_log},
    {IR_OP_LOG2, kir_log2}, {IR_OP_LOG1P, kir_log1p}, {IR_OP_SIN, kir_sin},   {IR_OP_COS, kir_cos},
    {IR_OP_TAN, kir_tan},   {IR_OP_TANH, kir_tanh}, {IR_OP_SIGMOID, kir_sigmoid}, {IR_OP_ERF, kir_erf},
};

/* f64 gelu's steps (ir/scalar.c, ir/kernel_ops.c) on the host around the kernel's own erfc and
 * exp: t = -x / sqrt 2 as th + tl, s = erfc(th) - tl (2/sqrt pi) e^(-th^2), (0.5 x) s. f32 gelu
 * is a math function of its own (kir_gelu). */
static void gelu_host(kir_type t, const double *x, int n, double *out)
{
    if (t == KIR_F32) {
        eval_math(kir_gelu, NULL, t, x, NULL, n, out);
        return;
    }
    double *th = malloc((size_t)n * sizeof *th), *tl = malloc((size_t)n * sizeof *tl);
    double *nsq = malloc((size_t)n * sizeof *nsq), *e = malloc((size_t)n * sizeof *e);
    double *d = malloc((size_t)n * sizeof *d);
    const double k = 0x1.20dd750429b6dp+0; /* 2/sqrt pi */
    for (int i = 0; i < n; i++) {
        double nx = -x[i], h = nx * 0x1.6a09e667f3bcdp-1;
        double l = fma(nx, -0x1.bdd3413b26456p-55, fma(nx, 0x1.6a09e667f3bcdp-1, -h));
        th[i] = h, tl[i] = fabs(h) < INFINITY ? l : 0.0, nsq[i] = -(h * h);
    }
    eval_math(kir_erfc, NULL, t, th, NULL, n, e);
    eval_math(kir_exp, NULL, t, nsq, NULL, n, d);
    for (int i = 0; i < n; i++)
        out[i] = (0.5 * x[i]) * fma(-(tl[i] * k), d[i], e[i]);
    free(th), free(tl), free(nsq), free(e), free(d);
}

/* The host composition of a composed op around the kernel's own math function, in t. */
static void composed_host(ir_op op, kir_type t, const double *x, const double *y, int n, double *out)
{
    double *m = malloc((size_t)n * sizeof *m);
    switch (op) {
    case IR_OP_GELU: gelu_host(t, x, n, out); break;
    case IR_OP_SILU:
        eval_math(kir_sigmoid, NULL, t, x, NULL, n, m);
        for (int i = 0; i < n; i++)
            out[i] = t == KIR_F32 ? (double)((float)x[i] * (float)m[i]) : x[i] * m[i];
        break;
    case IR_OP_RSQRT:
        for (int i = 0; i < n; i++)
            out[i] = t == KIR_F32 ? (double)(1.0f / sqrtf((float)x[i])) : 1.0 / sqrt(x[i]);
        break;
    case IR_OP_POW: eval_math(NULL, kir_pow, t, x, y, n, out); break;
    case IR_OP_ATAN2: eval_math(NULL, kir_atan2, t, x, y, n, out); break;
    default:
        for (size_t j = 0; j < COUNT(DIRECT_MATH); j++)
            if (DIRECT_MATH[j].op == op)
                eval_math(DIRECT_MATH[j].fn, NULL, t, x, NULL, n, out);
        break;
    }
    free(m);
}

static const ir_op MATH_UNARY[] = {IR_OP_EXP,  IR_OP_EXP2, IR_OP_EXPM1, IR_OP_LOG,  IR_OP_LOG2,    IR_OP_LOG1P,
                                   IR_OP_SIN,  IR_OP_COS,  IR_OP_TAN,   IR_OP_TANH, IR_OP_SIGMOID, IR_OP_ERF,
                                   IR_OP_GELU, IR_OP_SILU, IR_OP_RSQRT};

/* The composition is scalar.c's, operation for operation: bitwise equal to the host doing the
 * same steps in the same type around the kernel's own math functions. f16/bf16 compute in
 * f32 and round the result once. */
Test(kernel_ops, math_ops_compose_like_scalar_c)
{
    double x[200], y[200], got[200], want[200];
    int n = float_sweep(x, 200);
    uint64_t s = 3;
    for (int i = 0; i < n; i++)
        y[i] = i % 4 == 0 ? (double)(int)rng_uniform(&s, -6, 6) : rng_uniform(&s, -4, 4);
    for (int f = 0; f < 2; f++) {
        kir_type t = f ? KIR_F64 : KIR_F32;
        burnc_dtype_t dt = f ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
        double xr[200], yr[200];
        for (int i = 0; i < n; i++) {
            xr[i] = f ? x[i] : (double)(float)x[i];
            yr[i] = f ? y[i] : (double)(float)y[i];
        }
        for (size_t o = 0; o < COUNT(MATH_UNARY) + 2; o++) {
            bool bin = o >= COUNT(MATH_UNARY);
            ir_op op = bin ? (o == COUNT(MATH_UNARY) ? IR_OP_POW : IR_OP_ATAN2) : MATH_UNARY[o];
            eval_op(op, dt, xr, bin ? yr : NULL, n, got);
            composed_host(op, t, xr, yr, n, want);
            for (int i = 0; i < n; i++)
                cr_assert((isnan(got[i]) && isnan(want[i])) || f64_bits(got[i]) == f64_bits(want[i]),
                          "%s %s(%.17g, %.17g): kernel %.17g, composition %.17g", ir_op_name(op), ir_dtype_name(dt),
                          xr[i], yr[i], got[i], want[i]);
        }
    }
    /* f16 and bf16: the f32 result rounded once (gelu: kir_gelu16's) */
    for (int f = 0; f < 2; f++) {
        burnc_dtype_t dt = f ? BURNC_DTYPE_BF16 : BURNC_DTYPE_F16;
        double xr[200], yr[200], wide[200];
        for (int i = 0; i < n; i++) {
            xr[i] = ir_scalar_to_dtype(x[i] / 64, dt);
            yr[i] = ir_scalar_to_dtype(y[i], dt);
        }
        for (size_t o = 0; o < COUNT(MATH_UNARY) + 2; o++) {
            bool bin = o >= COUNT(MATH_UNARY);
            ir_op op = bin ? (o == COUNT(MATH_UNARY) ? IR_OP_POW : IR_OP_ATAN2) : MATH_UNARY[o];
            eval_op(op, dt, xr, bin ? yr : NULL, n, got);
            if (op == IR_OP_GELU)
                eval_math(kir_gelu16, NULL, KIR_F32, xr, NULL, n, wide);
            else
                eval_op(op, BURNC_DTYPE_F32, xr, bin ? yr : NULL, n, wide);
            for (int i = 0; i < n; i++) {
                double w = ir_scalar_to_dtype(wide[i], dt);
                cr_assert((isnan(got[i]) && isnan(w)) || f64_bits(got[i]) == f64_bits(w), "%s %s(%.9g): %.9g vs %.9g",
                          ir_op_name(op), ir_dtype_name(dt), xr[i], got[i], w);
            }
        }
    }
    BT_LEAK_CHECK();
}

/* |got - want| <= rel * |want| + abs, NaN with NaN, infinities equal. */
static bool close_to(double got, double want, double rel, double abs_tol)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

/* Wiring: each op computes the function scalar.c names (loose bounds: the functions' own
 * accuracy is tests/test_math.c's), over inputs where the functions are well conditioned. */
Test(kernel_ops, math_ops_approximate_scalar_c)
{
    enum { N = 400 };
    double x[N], y[N], xp[N], got[N];
    uint64_t s = 11;
    for (int i = 0; i < N; i++) {
        x[i] = rng_uniform(&s, -6, 6);
        xp[i] = rng_uniform(&s, 0.01, 50);
        y[i] = rng_uniform(&s, -3, 3);
    }
    for (int f = 0; f < 2; f++) {
        burnc_dtype_t dt = f ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
        double rel = f ? 1e-12 : 1e-5, abs_tol = f ? 1e-14 : 1e-6;
        for (size_t o = 0; o < COUNT(MATH_UNARY) + 2; o++) {
            bool bin = o >= COUNT(MATH_UNARY);
            ir_op op = bin ? (o == COUNT(MATH_UNARY) ? IR_OP_POW : IR_OP_ATAN2) : MATH_UNARY[o];
            bool positive = op == IR_OP_LOG || op == IR_OP_LOG2 || op == IR_OP_LOG1P || op == IR_OP_RSQRT ||
                            op == IR_OP_POW;
            const double *in = positive ? xp : x;
            if (op == IR_OP_TAN) /* stay away from the poles */
                for (int i = 0; i < N; i++)
                    xp[i] = fmod(xp[i], 1.4);
            if (op == IR_OP_TAN)
                in = xp;
            eval_op(op, dt, in, bin ? y : NULL, N, got);
            for (int i = 0; i < N; i++) {
                double xi = ir_scalar_to_dtype(in[i], dt), yi = ir_scalar_to_dtype(y[i], dt);
                double want = bin ? ir_binary_f(op, xi, yi) : ir_unary_f(op, xi, NULL);
                cr_assert(close_to(got[i], want, rel, abs_tol), "%s %s(%.17g, %.17g): got %.17g, want %.17g",
                          ir_op_name(op), ir_dtype_name(dt), xi, yi, got[i], want);
            }
        }
    }
    BT_LEAK_CHECK();
}

/* ---- Reductions -------------------------------------------------------------------------- */

/* kernel.h's order, written independently: a pairwise tree over n values with odd elements
 * carried up is the same as splitting at the largest power of two below n. */
static float tree_f32(const float *a, int64_t n, bool prod)
{
    if (n == 1)
        return a[0];
    int64_t p = 1;
    while (p * 2 < n)
        p *= 2;
    float l = tree_f32(a, p, prod), r = tree_f32(a + p, n - p, prod);
    return prod ? l * r : l + r;
}

static double tree_f64(const double *a, int64_t n)
{
    if (n == 1)
        return a[0];
    int64_t p = 1;
    while (p * 2 < n)
        p *= 2;
    return tree_f64(a, p) + tree_f64(a + p, n - p);
}

static float spec_f32(const float *x, int64_t n, bool prod)
{
    int64_t nl = (n + KIR_LEAF - 1) / KIR_LEAF;
    if (nl == 0)
        return prod ? 1.0f : 0.0f;
    float *leaf = malloc((size_t)nl * sizeof *leaf);
    for (int64_t l = 0; l < nl; l++) {
        float lanes[KIR_LANES];
        for (int i = 0; i < KIR_LANES; i++)
            lanes[i] = prod ? 1.0f : 0.0f;
        for (int64_t j = l * KIR_LEAF; j < n && j < (l + 1) * KIR_LEAF; j++)
            lanes[j % KIR_LANES] = prod ? lanes[j % KIR_LANES] * x[j] : lanes[j % KIR_LANES] + x[j];
        leaf[l] = tree_f32(lanes, KIR_LANES, prod);
    }
    float r = tree_f32(leaf, nl, prod);
    free(leaf);
    return r;
}

static double spec_sum_f64(const double *x, int64_t n)
{
    int64_t nl = (n + KIR_LEAF - 1) / KIR_LEAF;
    if (nl <= 0)
        return 0.0;
    double *leaf = malloc((size_t)nl * sizeof *leaf);
    for (int64_t l = 0; l < nl; l++) {
        double lanes[KIR_LANES] = {0};
        for (int64_t j = l * KIR_LEAF; j < n && j < (l + 1) * KIR_LEAF; j++)
            lanes[j % KIR_LANES] += x[j];
        leaf[l] = tree_f64(lanes, KIR_LANES);
    }
    double r = tree_f64(leaf, nl);
    free(leaf);
    return r;
}

/* Reduces one row of n elements of dt (a rank-1 kernel with no outer axis); the result is
 * written to `out` as the stage's value type (I64 for ARG*). */
static void reduce_row(kir_combiner c, burnc_dtype_t dt, const void *data, int64_t n, void *out)
{
    const int64_t ext[1] = {n};
    kt t;
    kt_init(&t, 1, 0, ext);
    int ii = kt_in(&t, dt, data, 0, NULL);
    bool arg = c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN;
    burnc_dtype_t od = arg ? BURNC_DTYPE_I64 : (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) ? BURNC_DTYPE_F32 : dt;
    int oo = kt_out(&t, od, out, 0, (const int64_t[]){0});
    int s = kt_stage(&t, c, kt_load(&t, ii));
    kt_store(&t, oo, kt_reduced(&t, s), true);
    kt_eval(&t);
    kt_free(&t);
}

static float sum_f32(const float *x, int64_t n)
{
    float r;
    reduce_row(KIR_COMBINE_SUM, BURNC_DTYPE_F32, x, n, &r);
    return r;
}

/* Hand-made rows whose sum depends on the order: the lanes, then the leaves. */
Test(reduce, sum_order_by_hand)
{
    float *x = calloc(5 * KIR_LEAF, sizeof *x);
    /* lanes: 1 in lane 0; 1e8 and -1e8 both in lane 1. Sequentially 1 + 1e8 loses the 1. */
    x[0] = 1.0f, x[1] = 1e8f, x[33] = -1e8f;
    cr_assert_eq(sum_f32(x, 64), 1.0f);
    float seq = 0;
    for (int i = 0; i < 64; i++)
        seq += x[i];
    cr_assert_eq(seq, 0.0f, "the example does not depend on the order");
    /* leaves 1e8, 1, -1e8, 1: pairwise (1e8 + 1) + (-1e8 + 1) = 0, in sequence 1 */
    memset(x, 0, 5 * KIR_LEAF * sizeof *x);
    x[0] = 1e8f, x[KIR_LEAF] = 1.0f, x[2 * KIR_LEAF] = -1e8f, x[3 * KIR_LEAF] = 1.0f;
    cr_assert_eq(sum_f32(x, 4 * KIR_LEAF), 0.0f);
    /* a fifth leaf is carried up: ((l0 + l1) + (l2 + l3)) + l4 = 0 + 1 */
    x[4 * KIR_LEAF] = 1.0f;
    cr_assert_eq(sum_f32(x, 5 * KIR_LEAF), 1.0f);
    /* a short last leaf: 4 leaves and 3 positions */
    cr_assert_eq(sum_f32(x, 4 * KIR_LEAF + 3), 1.0f);
    /* three leaves: (1e8 + 1) + -1e8 = 0 */
    cr_assert_eq(sum_f32(x, 3 * KIR_LEAF), 0.0f);
    free(x);
    BT_LEAK_CHECK();
}

/* Random rows with a wide dynamic range, for lengths around every boundary, equal the
 * independent implementation bit for bit, and often differ from a sequential sum. */
Test(reduce, sum_and_prod_follow_the_specified_order)
{
    static const int64_t lens[] = {0, 1, 2, 5, 31, 32, 33, 64, 100, 4095, 4096, 4097, 8191, 8192,
                                   3 * KIR_LEAF + 17, 5 * KIR_LEAF + 1, 7 * KIR_LEAF, 12 * KIR_LEAF + 3};
    int64_t nmax = 12 * KIR_LEAF + 3;
    float *x = malloc((size_t)nmax * sizeof *x), *p = malloc((size_t)nmax * sizeof *p);
    double *xd = malloc((size_t)nmax * sizeof *xd);
    uint64_t s = 99;
    for (int64_t i = 0; i < nmax; i++) {
        xd[i] = rng_uniform(&s, -1, 1) * pow(10.0, (double)(int)rng_uniform(&s, -3, 8));
        x[i] = (float)xd[i];
        p[i] = (float)rng_uniform(&s, 0.999, 1.001);
    }
    int differs = 0;
    for (size_t l = 0; l < COUNT(lens); l++) {
        int64_t n = lens[l];
        float got = sum_f32(x, n), want = spec_f32(x, n, false);
        cr_assert_eq(f32_bits(got), f32_bits(want), "f32 sum of %lld: got %.9g, want %.9g", (long long)n, (double)got,
                     (double)want);
        float seq = 0;
        for (int64_t i = 0; i < n; i++)
            seq += x[i];
        differs += seq != got;
        double gd;
        reduce_row(KIR_COMBINE_SUM, BURNC_DTYPE_F64, xd, n, &gd);
        cr_assert_eq(f64_bits(gd), f64_bits(spec_sum_f64(xd, n)), "f64 sum of %lld", (long long)n);
        float gp;
        reduce_row(KIR_COMBINE_PROD, BURNC_DTYPE_F32, p, n, &gp);
        cr_assert_eq(f32_bits(gp), f32_bits(spec_f32(p, n, true)), "f32 prod of %lld: got %.9g", (long long)n,
                     (double)gp);
    }
    cr_assert(differs >= 5, "only %d lengths where the order mattered", differs);
    free(x), free(p), free(xd);
    BT_LEAK_CHECK();
}

/* f16 rows are summed in f32 (their loads widen): the f32 result of the same order. */
Test(reduce, f16_rows_sum_in_f32)
{
    enum { N = 3 * KIR_LEAF + 5 };
    double *v = malloc(N * sizeof *v);
    float *w = malloc(N * sizeof *w);
    uint64_t s = 5;
    for (int i = 0; i < N; i++)
        v[i] = rng_uniform(&s, -100, 100);
    void *h = make_buf(BURNC_DTYPE_F16, v, N);
    for (int i = 0; i < N; i++)
        w[i] = (float)get_f(h, BURNC_DTYPE_F16, i);
    float got;
    reduce_row(KIR_COMBINE_SUM, BURNC_DTYPE_F16, h, N, &got);
    cr_assert_eq(f32_bits(got), f32_bits(spec_f32(w, N, false)));
    free(v), free(w), free(h);
    BT_LEAK_CHECK();
}

Test(reduce, integer_combiners_wrap)
{
    int32_t a[70];
    for (int i = 0; i < 70; i++)
        a[i] = INT32_MAX - i;
    int32_t r;
    reduce_row(KIR_COMBINE_SUM, BURNC_DTYPE_I32, a, 70, &r);
    uint32_t want = 0;
    for (int i = 0; i < 70; i++)
        want += (uint32_t)a[i];
    cr_assert_eq((uint32_t)r, want);
    uint8_t u[40];
    for (int i = 0; i < 40; i++)
        u[i] = (uint8_t)(3 + i);
    uint8_t up;
    reduce_row(KIR_COMBINE_PROD, BURNC_DTYPE_U8, u, 40, &up);
    unsigned wp = 1;
    for (int i = 0; i < 40; i++)
        wp = (wp * u[i]) & 0xff;
    cr_assert_eq(up, wp);
    int64_t b[5000];
    for (int i = 0; i < 5000; i++)
        b[i] = (int64_t)((i * 7919) % 5000) - 2500;
    b[4321] = INT64_MIN + 1, b[77] = INT64_MAX - 3;
    int64_t mx, mn, amx, amn;
    reduce_row(KIR_COMBINE_MAX, BURNC_DTYPE_I64, b, 5000, &mx);
    reduce_row(KIR_COMBINE_MIN, BURNC_DTYPE_I64, b, 5000, &mn);
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_I64, b, 5000, &amx);
    reduce_row(KIR_COMBINE_ARGMIN, BURNC_DTYPE_I64, b, 5000, &amn);
    cr_assert_eq(mx, INT64_MAX - 3);
    cr_assert_eq(mn, INT64_MIN + 1);
    cr_assert_eq(amx, 77);
    cr_assert_eq(amn, 4321);
    uint8_t bo[3] = {0, 1, 1};
    int64_t abo;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_BOOL, bo, 3, &abo);
    cr_assert_eq(abo, 1);
    BT_LEAK_CHECK();
}

/* ARGMAX/ARGMIN: the first extreme in row order, whichever lane or leaf holds it; the first
 * NaN wins over everything; MAX/MIN propagate NaN. */
Test(reduce, arg_and_extreme_with_nan_and_ties)
{
    enum { N = 3 * KIR_LEAF };
    float *x = malloc(N * sizeof *x);
    int64_t r;
    float v;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 97) * 0.5f;
    /* ties: the maximum at positions 4, 37 (other lanes), 5000 (other leaf) */
    x[37] = 100, x[5000] = 100, x[4] = 100;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 4);
    x[4] = 0;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 37);
    /* the first one in a later lane: 38 (lane 6) before 69 (lane 5) */
    x[37] = 0, x[38] = 100, x[69] = 100;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 38);
    /* the minimum -1 at 9000 and 4100 (leaf 1, lane 4) and 8200 */
    x[9000] = -1, x[4100] = -1, x[8200] = -1;
    reduce_row(KIR_COMBINE_ARGMIN, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 4100);
    /* -inf everywhere: position 0 */
    float ninf[40];
    for (int i = 0; i < 40; i++)
        ninf[i] = -INFINITY;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, ninf, 40, &r);
    cr_assert_eq(r, 0);
    reduce_row(KIR_COMBINE_MAX, BURNC_DTYPE_F32, ninf, 40, &v);
    cr_assert(isinf(v) && v < 0);
    /* NaNs at 6000 and 5000 (the earlier wins, for both), and the max stays NaN */
    x[6000] = NAN, x[5000] = NAN;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 5000);
    reduce_row(KIR_COMBINE_ARGMIN, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 5000);
    reduce_row(KIR_COMBINE_MAX, BURNC_DTYPE_F32, x, N, &v);
    cr_assert(isnan(v));
    reduce_row(KIR_COMBINE_MIN, BURNC_DTYPE_F32, x, N, &v);
    cr_assert(isnan(v));
    x[41] = NAN, x[72] = NAN; /* lanes 9 and 8 of leaf 0: position 41 comes first */
    reduce_row(KIR_COMBINE_ARGMIN, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 41);
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, x, N, &r);
    cr_assert_eq(r, 41);
    free(x);
    /* f64 NaN first in its lane but not in the row */
    double d[64];
    for (int i = 0; i < 64; i++)
        d[i] = i;
    d[50] = NAN, d[3] = NAN;
    reduce_row(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F64, d, 64, &r);
    cr_assert_eq(r, 3);
    BT_LEAK_CHECK();
}

/* A row with no reduced positions gives the identity; its row stores still run. */
Test(reduce, empty_rows_give_the_identity)
{
    static const kir_combiner combs[] = {KIR_COMBINE_SUM, KIR_COMBINE_PROD, KIR_COMBINE_MAX,
                                         KIR_COMBINE_MIN, KIR_COMBINE_ARGMAX, KIR_COMBINE_ARGMIN};
    const int64_t ext[2] = {2, 0};
    float x[1] = {0};
    int32_t xi[1] = {0};
    float f[4][2];
    int64_t arg[2][2];
    int32_t imax[2], imin[2];
    kt t;
    kt_init(&t, 2, 1, ext);
    int ii = kt_in(&t, BURNC_DTYPE_F32, x, 0, NULL);
    int32_t lx = kt_load(&t, ii);
    const int64_t rowstr[2] = {1, 0};
    for (int c = 0; c < 4; c++) {
        int o = kt_out(&t, BURNC_DTYPE_F32, f[c], 0, rowstr);
        kt_store(&t, o, kt_reduced(&t, kt_stage(&t, combs[c], lx)), true);
    }
    kt_eval(&t);
    cr_assert(f[0][0] == 0 && !signbit(f[0][0]) && f[0][1] == 0);
    cr_assert(f[1][0] == 1 && f[1][1] == 1);
    cr_assert(isinf(f[2][0]) && f[2][0] < 0);
    cr_assert(isinf(f[3][1]) && f[3][1] > 0);
    kt_free(&t);
    /* ARG* and integer extremes, in a second kernel (four stages at most) */
    kt_init(&t, 2, 1, ext);
    ii = kt_in(&t, BURNC_DTYPE_F32, x, 0, NULL);
    int ij = kt_in(&t, BURNC_DTYPE_I32, xi, 0, NULL);
    lx = kt_load(&t, ii);
    int32_t lj = kt_load(&t, ij);
    for (int c = 0; c < 2; c++) {
        int o = kt_out(&t, BURNC_DTYPE_I64, arg[c], 0, rowstr);
        kt_store(&t, o, kt_reduced(&t, kt_stage(&t, combs[4 + c], lx)), true);
    }
    arg[0][0] = arg[0][1] = arg[1][0] = arg[1][1] = 99;
    int o1 = kt_out(&t, BURNC_DTYPE_I32, imax, 0, rowstr), o2 = kt_out(&t, BURNC_DTYPE_I32, imin, 0, rowstr);
    kt_store(&t, o1, kt_reduced(&t, kt_stage(&t, KIR_COMBINE_MAX, lj)), true);
    kt_store(&t, o2, kt_reduced(&t, kt_stage(&t, KIR_COMBINE_MIN, lj)), true);
    kt_eval(&t);
    cr_assert(arg[0][0] == 0 && arg[0][1] == 0 && arg[1][0] == 0 && arg[1][1] == 0);
    cr_assert(imax[0] == INT32_MIN && imax[1] == INT32_MIN && imin[0] == INT32_MAX && imin[1] == INT32_MAX);
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* Two reduced axes read through a permuted view: positions are numbered row-major over the
 * reduced axes of the domain, whatever the memory order. */
Test(reduce, positions_are_row_major_over_reduced_axes)
{
    const int64_t ext[3] = {2, 3, 5}; /* rows x (3 x 5) */
    float mem[30];                   /* stored as [5][3][2]: strides {1, 2, 6} */
    const int64_t str[3] = {1, 2, 6};
    for (int i = 0; i < 30; i++)
        mem[i] = 0;
    /* row 0: max at (1, 4) = position 9, also (2, 0) = 10; row 1: max at (0, 3) = position 3 */
    mem[0 + 1 * 2 + 4 * 6] = 7, mem[0 + 2 * 2 + 0 * 6] = 7, mem[1 + 0 * 2 + 3 * 6] = 5;
    float sums[2];
    int64_t am[2];
    kt t;
    kt_init(&t, 3, 1, ext);
    int ii = kt_in(&t, BURNC_DTYPE_F32, mem, 0, str);
    int oa = kt_out(&t, BURNC_DTYPE_I64, am, 0, (const int64_t[]){1, 0, 0});
    int os = kt_out(&t, BURNC_DTYPE_F32, sums, 0, (const int64_t[]){1, 0, 0});
    int32_t lx = kt_load(&t, ii);
    kt_store(&t, oa, kt_reduced(&t, kt_stage(&t, KIR_COMBINE_ARGMAX, lx)), true);
    /* sum of position * value, built from INDEX of both reduced axes */
    int32_t pos = kir_emit(&t.k, KIR_ADD, KIR_I64,
                           kir_emit(&t.k, KIR_MUL, KIR_I64, kir_emit(&t.k, KIR_INDEX, KIR_I64, 1, -1, -1),
                                    kir_emit(&t.k, KIR_EXTENT, KIR_I64, 2, -1, -1), -1),
                           kir_emit(&t.k, KIR_INDEX, KIR_I64, 2, -1, -1), -1);
    int32_t pv = kir_emit(&t.k, KIR_MUL, KIR_F32, kir_emit(&t.k, KIR_CONVERT, KIR_F32, pos, -1, -1), lx, -1);
    kt_store(&t, os, kt_reduced(&t, kt_stage(&t, KIR_COMBINE_SUM, pv)), true);
    kt_eval(&t);
    cr_assert_eq(am[0], 9);
    cr_assert_eq(am[1], 3);
    cr_assert_eq(sums[0], 9 * 7 + 10 * 7);
    cr_assert_eq(sums[1], 3 * 5);
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* ---- Several stages ---------------------------------------------------------------------- */

/* softmax over rows as one kernel: a max stage, a sum-of-exp stage that reads it, and an
 * element store that reads both; equal to the same steps done on the host in the specified
 * order around the kernel's own exp. */
Test(stages, softmax_rows)
{
    enum { R = 3, C = KIR_LEAF + 904 };
    const int64_t ext[2] = {R, C};
    float *x = malloc(R * C * sizeof *x), *y = malloc(R * C * sizeof *y);
    uint64_t s = 17;
    for (int i = 0; i < R * C; i++)
        x[i] = (float)rng_uniform(&s, -20, 20);
    kt t;
    kt_init(&t, 2, 1, ext);
    int ii = kt_in(&t, BURNC_DTYPE_F32, x, 0, NULL), oo = kt_out(&t, BURNC_DTYPE_F32, y, 0, NULL);
    int32_t lx = kt_load(&t, ii);
    int s0 = kt_stage(&t, KIR_COMBINE_MAX, lx);
    int32_t e = kir_exp(&t.k, kir_emit(&t.k, KIR_SUB, KIR_F32, lx, kt_reduced(&t, s0), -1));
    int s1 = kt_stage(&t, KIR_COMBINE_SUM, e);
    kt_store(&t, oo, kir_emit(&t.k, KIR_DIV, KIR_F32, e, kt_reduced(&t, s1), -1), false);
    kt_eval(&t);
    kt_free(&t);
    double *d = malloc(C * sizeof *d), *ed = malloc(C * sizeof *ed);
    float *ef = malloc(C * sizeof *ef);
    for (int r = 0; r < R; r++) {
        float m = -INFINITY;
        for (int j = 0; j < C; j++)
            m = x[r * C + j] > m ? x[r * C + j] : m;
        for (int j = 0; j < C; j++)
            d[j] = x[r * C + j] - m;
        eval_math(kir_exp, NULL, KIR_F32, d, NULL, C, ed);
        for (int j = 0; j < C; j++)
            ef[j] = (float)ed[j];
        float sum = spec_f32(ef, C, false);
        for (int j = 0; j < C; j++)
            cr_assert_eq(f32_bits(y[r * C + j]), f32_bits(ef[j] / sum), "row %d col %d: %.9g vs %.9g", r, j,
                         (double)y[r * C + j], (double)(ef[j] / sum));
    }
    free(x), free(y), free(d), free(ed), free(ef);
    BT_LEAK_CHECK();
}

/* mean and variance (two passes) as row stores, the centered values as an element store. */
Test(stages, mean_var_and_centered)
{
    enum { R = 4, C = KIR_LEAF + 7 };
    const int64_t ext[2] = {R, C};
    float *x = malloc(R * C * sizeof *x), *cen = malloc(R * C * sizeof *cen), mean[R], var[R];
    uint64_t s = 23;
    for (int i = 0; i < R * C; i++)
        x[i] = (float)rng_uniform(&s, 1000, 1001); /* a large mean: the two passes matter */
    kt t;
    kt_init(&t, 2, 1, ext);
    const int64_t rowstr[2] = {1, 0};
    int ii = kt_in(&t, BURNC_DTYPE_F32, x, 0, NULL);
    int om = kt_out(&t, BURNC_DTYPE_F32, mean, 0, rowstr), ov = kt_out(&t, BURNC_DTYPE_F32, var, 0, rowstr);
    int oc = kt_out(&t, BURNC_DTYPE_F32, cen, 0, NULL);
    kir_kernel *k = &t.k;
    int32_t lx = kt_load(&t, ii);
    int32_t n = kir_emit(k, KIR_ROW_LEN, KIR_I64, -1, -1, -1);
    int32_t mu = kir_emit(k, KIR_DIV, KIR_F32, kt_reduced(&t, kt_stage(&t, KIR_COMBINE_SUM, lx)),
                          kir_emit(k, KIR_CONVERT, KIR_F32, n, -1, -1), -1);
    int32_t dev = kir_emit(k, KIR_SUB, KIR_F32, lx, mu, -1);
    int s1 = kt_stage(&t, KIR_COMBINE_SUM, kir_emit(k, KIR_MUL, KIR_F32, dev, dev, -1));
    int32_t nm1 = kir_emit(k, KIR_CONVERT, KIR_F32, kir_emit(k, KIR_SUB, KIR_I64, n, kir_const_i(k, KIR_I64, 1), -1), -1, -1);
    kt_store(&t, om, mu, true);
    kt_store(&t, ov, kir_emit(k, KIR_DIV, KIR_F32, kt_reduced(&t, s1), nm1, -1), true);
    kt_store(&t, oc, dev, false);
    kt_eval(&t);
    kt_free(&t);
    float *sq = malloc(C * sizeof *sq);
    for (int r = 0; r < R; r++) {
        float m = spec_f32(x + r * C, C, false) / (float)C;
        for (int j = 0; j < C; j++) {
            float dj = x[r * C + j] - m;
            sq[j] = dj * dj;
            cr_assert_eq(f32_bits(cen[r * C + j]), f32_bits(dj));
        }
        cr_assert_eq(f32_bits(mean[r]), f32_bits(m));
        cr_assert_eq(f32_bits(var[r]), f32_bits(spec_f32(sq, C, false) / (float)(C - 1)), "row %d var %.9g", r,
                     (double)var[r]);
        cr_assert(fabs(var[r] - 1.0 / 12) < 0.01, "variance %g of U(1000, 1001)", (double)var[r]);
    }
    free(x), free(cen), free(sq);
    BT_LEAK_CHECK();
}

/* A row output with an offset and strides over the outer axes of a rank-3 domain, and a
 * broadcast input (stride 0 on the reduced axis) read by a row store. */
Test(stages, row_outputs_with_offsets_and_broadcast_inputs)
{
    const int64_t ext[3] = {2, 3, 4};
    float x[24], bias[3] = {10, 20, 30}, out[20];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    for (int i = 0; i < 20; i++)
        out[i] = -1;
    kt t;
    kt_init(&t, 3, 2, ext);
    int ii = kt_in(&t, BURNC_DTYPE_F32, x, 0, NULL);
    int ib = kt_in(&t, BURNC_DTYPE_F32, bias, 0, (const int64_t[]){0, 1, 0});
    int oo = kt_out(&t, BURNC_DTYPE_F32, out, 2, (const int64_t[]){1, 4, 0}); /* transposed, after 2 */
    int32_t sum = kt_reduced(&t, kt_stage(&t, KIR_COMBINE_SUM, kt_load(&t, ii)));
    kt_store(&t, oo, kir_emit(&t.k, KIR_ADD, KIR_F32, sum, kt_load(&t, ib), -1), true);
    kt_eval(&t);
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 3; i1++) {
            float sum4 = 0; /* small integers: exact in any order */
            for (int j = 0; j < 4; j++)
                sum4 += x[(i0 * 3 + i1) * 4 + j];
            cr_assert_eq(out[2 + i0 + 4 * i1], sum4 + bias[i1]);
        }
    cr_assert(out[0] == -1 && out[1] == -1 && out[4] == -1 && out[5] == -1);
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* ---- kir_valid --------------------------------------------------------------------------- */

/* A small valid kernel: rank 2, one outer axis; in0 dense, in1 broadcast along the reduced
 * axis; %2 = in0 * in1 summed by stage 0; out0 (element) = in0 - reduced, out1 (row) =
 * reduced + in1.
 *   %0 load in0   %1 load in1   %2 mul %0 %1   %3 reduced 0   %4 add %3 %1   %5 sub %0 %3 */
typedef struct base_bufs {
    float x[6], b[2], o[6], r[2];
} base_bufs;

static void base_kernel(kt *t, base_bufs *m)
{
    const int64_t ext[2] = {2, 3};
    for (int i = 0; i < 6; i++)
        m->x[i] = (float)(i + 1);
    m->b[0] = 2, m->b[1] = 3;
    kt_init(t, 2, 1, ext);
    int i0 = kt_in(t, BURNC_DTYPE_F32, m->x, 0, NULL);
    int i1 = kt_in(t, BURNC_DTYPE_F32, m->b, 0, (const int64_t[]){1, 0});
    int o0 = kt_out(t, BURNC_DTYPE_F32, m->o, 0, NULL);
    int o1 = kt_out(t, BURNC_DTYPE_F32, m->r, 0, (const int64_t[]){1, 0});
    int32_t l0 = kt_load(t, i0), l1 = kt_load(t, i1);
    int s = kt_stage(t, KIR_COMBINE_SUM, kir_emit(&t->k, KIR_MUL, KIR_F32, l0, l1, -1));
    int32_t red = kt_reduced(t, s);
    int32_t row = kir_emit(&t->k, KIR_ADD, KIR_F32, red, l1, -1);
    kt_store(t, o0, kir_emit(&t->k, KIR_SUB, KIR_F32, l0, red, -1), false);
    kt_store(t, o1, row, true);
    snprintf(t->k.name, sizeof t->k.name, "base");
}

static int32_t emit(kt *t, kir_opcode op, kir_type ty, int32_t a, int32_t b, int32_t c)
{
    return kir_emit(&t->k, op, ty, a, b, c);
}

/* Applies mutation `which` to the base kernel. */
static void mutate(kt *t, int which)
{
    kir_kernel *k = &t->k;
    int32_t v;
    switch (which) {
    case 0: break;
    case 1: k->insts[2].b = 4; break;
    case 2: k->insts[2].a = -1; break;
    case 3: k->insts[2].type = KIR_F64; break;
    case 4: k->insts[2].op = KIR_LT; break;
    case 5: k->insts[2] = (kir_inst){.op = KIR_SELECT, .type = KIR_F32, .a = 0, .b = 1, .c = 1}; break;
    case 6: k->insts[0].a = 5; break;
    case 7: k->insts[0].type = KIR_F64; break;
    case 8: k->stages[0].value = 5; break;
    case 9:
        kt_stage(t, KIR_COMBINE_MAX, 0);
        v = emit(t, KIR_ADD, KIR_F32, 0, emit(t, KIR_REDUCED, KIR_F32, 1, -1, -1), -1);
        k->stages[0].value = v;
        break;
    case 10:
        v = emit(t, KIR_CONVERT, KIR_F32, emit(t, KIR_INDEX, KIR_I64, 1, -1, -1), -1, -1);
        k->stores[1].value = emit(t, KIR_ADD, KIR_F32, 4, v, -1);
        break;
    case 11: k->stores[1].value = 0; break;
    case 12: k->stores[1].value = 1; break; /* broadcast along the reduced axis: fine */
    case 13:                                /* an outer index in a row store: fine */
        v = emit(t, KIR_CONVERT, KIR_F32, emit(t, KIR_INDEX, KIR_I64, 0, -1, -1), -1, -1);
        k->stores[1].value = emit(t, KIR_ADD, KIR_F32, 4, v, -1);
        break;
    case 14: k->n_inputs = KIR_MAX_INPUTS + 1; break;
    case 15: k->rank = BURNC_MAX_RANK + 1; break;
    case 16: k->n_outer = 3; break;
    case 17: k->inputs[0].dtype = BURNC_DTYPE_DEFAULT; break;
    case 18: k->inputs[1].stride[0] = 3; break;
    case 19: k->n_stores = 1; break;
    case 20: k->stores[1].slot = 0; break;
    case 21: k->outputs[0].dtype = BURNC_DTYPE_I32; break;
    case 22: emit(t, KIR_ROUND, KIR_F32, 0, -1, -1); break;
    case 23: k->cap_insts = -1; break;
    case 24: k->stages[0].combiner = 9; break;
    case 25: k->stages[0].value = emit(t, KIR_EQ, KIR_BOOL, 0, 0, -1); break;
    case 26: v = kir_const_i(k, KIR_I32, 3), emit(t, KIR_MULHI, KIR_I32, v, v, -1); break;
    case 27: emit(t, KIR_BITCAST, KIR_I64, 0, -1, -1); break;
    case 28: k->insts[2].op = 200; break;
    case 29: k->insts[4].type = KIR_F16; break;
    case 30: k->insts[3].a = 3; break;
    case 31: k->insts[3].type = KIR_F64; break;
    case 32: emit(t, KIR_INDEX, KIR_I64, 2, -1, -1); break;
    case 33: emit(t, KIR_ARG, KIR_F32, 0, -1, -1); break;
    case 34: k->stores[0].slot = 5; break;
    case 35: k->stages[0].value = 99; break;
    case 36: k->n_stages = KIR_MAX_STAGES + 1; break;
    case 37: /* f64 and integer values may be stored into f16/bf16 outputs (one rounding) */
        k->outputs[1].dtype = BURNC_DTYPE_F16;
        k->outputs[0].dtype = BURNC_DTYPE_BF16;
        k->stores[0].value = emit(t, KIR_CONVERT, KIR_F64, 5, -1, -1);
        k->stores[1].value = emit(t, KIR_CONVERT, KIR_I32, 4, -1, -1);
        break;
    case 38:
        k->outputs[0].dtype = BURNC_DTYPE_F16;
        k->stores[0].value = emit(t, KIR_EQ, KIR_BOOL, 0, 0, -1);
        break;
    case 39: k->outputs[0].dtype = BURNC_DTYPE_F64; break;
    case 40: emit(t, KIR_ADD, KIR_BOOL, emit(t, KIR_EQ, KIR_BOOL, 0, 0, -1), emit(t, KIR_EQ, KIR_BOOL, 0, 0, -1), -1); break;
    case 41: emit(t, KIR_SQRT, KIR_I32, kir_const_i(k, KIR_I32, 4), -1, -1); break;
    case 42: emit(t, KIR_SHL, KIR_BOOL, emit(t, KIR_EQ, KIR_BOOL, 0, 0, -1), emit(t, KIR_EQ, KIR_BOOL, 0, 0, -1), -1); break;
    case 43: emit(t, KIR_FMA, KIR_F32, 0, 1, kir_const_f(k, KIR_F64, 1)); break;
    case 44: emit(t, KIR_EXTENT, KIR_I32, 0, -1, -1); break;
    case 45: emit(t, KIR_LT, KIR_BOOL, 0, kir_const_f(k, KIR_F64, 1), -1); break;
    default: cr_assert_fail("no mutation %d", which);
    }
}

Test(kernel, valid_accepts_and_rejects)
{
    static const struct {
        int which;
        const char *why; /* NULL: still valid */
    } cases[] = {
        {0, NULL},                {1, "does not precede"},     {2, "does not precede"},   {3, "needs"},
        {4, "bool result"},       {5, "bool condition"},       {6, "load of input 5"},    {7, "load of a f32 input"},
        {8, "stage 0"},           {9, "stage 0"},              {10, "depends on the reduced"},
        {11, "depends on the reduced"}, {12, NULL},            {13, NULL},                {14, "inputs"},
        {15, "rank"},             {16, "rank"},                {17, "not a storage dtype"}, {18, "stride class"},
        {19, "stored 0 times"},   {20, "stored 2 times"},      {21, "into a i32 output"}, {22, "imm.i"},
        {23, "out of memory"},    {24, "combiner"},            {25, "sum over bool"},     {26, "u32 or u64"},
        {27, "same width"},       {28, "opcode 200"},          {29, "not a value type"},  {30, "reduced of stage 3"},
        {31, "must be f32"},      {32, "axis 2"},              {33, "scalar argument 0"}, {34, "output 5"},
        {35, "value %99"},        {36, "stages"},              {37, NULL},                {38, "bool value into a f16"},
        {39, "f32 value into a f64"}, {40, "number type"},     {41, "f32 or f64"},        {42, "integer type"},
        {43, "f32 or f64 and operands"}, {44, "must be i64"},  {45, "one type"},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        kt t;
        base_bufs m;
        base_kernel(&t, &m);
        mutate(&t, cases[i].which);
        char why[256] = "untouched";
        bool ok = kir_valid(&t.k, why, sizeof why);
        if (!cases[i].why) {
            cr_assert(ok, "case %d should be valid: %s", cases[i].which, why);
            cr_assert_str_empty(why);
        } else {
            cr_assert(!ok, "case %d should be invalid (%s)", cases[i].which, cases[i].why);
            cr_assert(strstr(why, cases[i].why), "case %d: reason \"%s\" lacks \"%s\"", cases[i].which, why,
                      cases[i].why);
            kir_args a = kt_args(&t);
            burnc_error_clear();
            cr_assert_eq(kir_eval(&t.k, &a), BURNC_ERR_INTERNAL);
            BT_ASSERT_LAST_ERROR(BURNC_ERR_INTERNAL, "invalid kernel");
        }
        kt_free(&t);
    }
    cr_assert(!kir_valid(NULL, NULL, 0));
    BT_LEAK_CHECK();
}

/* The base kernel runs: out0 = x - sum(x * b), out1 = sum + b. */
Test(kernel, base_kernel_runs)
{
    kt t;
    base_bufs m;
    base_kernel(&t, &m);
    kt_eval(&t);
    for (int r = 0; r < 2; r++) {
        float s = (m.x[r * 3] * m.b[r] + m.x[r * 3 + 1] * m.b[r]) + m.x[r * 3 + 2] * m.b[r];
        cr_assert_eq(m.r[r], s + m.b[r]);
        for (int j = 0; j < 3; j++)
            cr_assert_eq(m.o[r * 3 + j], m.x[r * 3 + j] - s);
    }
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* A kernel whose instruction array is broken refuses further instructions. */
Test(kernel, broken_kernel_refuses_more)
{
    kir_kernel k;
    kir_init(&k, 0, 0);
    for (int i = 0; i < 200; i++)
        cr_assert_eq(kir_const_i(&k, KIR_I32, i), i);
    k.cap_insts = -1; /* what a failed growth leaves */
    cr_assert_eq(kir_const_i(&k, KIR_I32, 1), -1);
    cr_assert_eq(kir_emit(&k, KIR_NEG, KIR_I32, 0, -1, -1), -1);
    cr_assert_eq(kir_round(&k, 0, KIR_F16), -1);
    int32_t w[4];
    cr_assert(!kir_philox_block(&k, 0, 0, w));
    char why[64];
    cr_assert(!kir_valid(&k, why, sizeof why));
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* ---- kir_hash ---------------------------------------------------------------------------- */

Test(kernel, hash_sees_every_field)
{
    enum { N = 64 };
    uint64_t h[N];
    int n = 0;
    kt t;
    base_bufs m;
    base_kernel(&t, &m);
    uint64_t base = kir_hash(&t.k);
    cr_assert_eq(kir_hash(&t.k), base, "not deterministic");
    snprintf(t.k.name, sizeof t.k.name, "renamed");
    cr_assert_eq(kir_hash(&t.k), base, "the name is not structure");
    t.k.inputs[0].stride[5] = KIR_STRIDE_ANY; /* beyond the rank: no codegen sees it */
    cr_assert_eq(kir_hash(&t.k), base);
    kt_free(&t);
    h[n++] = base;
    /* one change at a time */
    for (int which = 0; which < 30; which++) {
        base_kernel(&t, &m);
        kir_kernel *k = &t.k;
        switch (which) {
        case 0: k->rank = 3; break;
        case 1: k->n_outer = 2; break;
        case 2: k->n_scalars = 1; break;
        case 3: k->inputs[0].dtype = BURNC_DTYPE_F16; break;
        case 4: k->inputs[0].stride[1] = KIR_STRIDE_ANY; break;
        case 5: k->inputs[1].stride[0] = KIR_STRIDE_ZERO; break;
        case 6: k->outputs[0].stride[0] = KIR_STRIDE_UNIT; break;
        case 7: k->outputs[1].dtype = BURNC_DTYPE_BF16; break;
        case 8: k->stages[0].combiner = KIR_COMBINE_MAX; break;
        case 9: k->stages[0].value = 0; break;
        case 10: k->stores[1].row = false; break;
        case 11: k->stores[0].slot = 1, k->stores[1].slot = 0; break;
        case 12: k->insts[2].op = KIR_ADD; break;
        case 13: k->insts[4].type = KIR_F64; break;
        case 14: k->insts[2].a = 1, k->insts[2].b = 0; break;
        case 15: k->insts[4].b = 0; break;
        case 16: k->insts[2].c = 0; break;
        case 17: kir_const_f(k, KIR_F32, 1.0); break;
        case 18: k->n_inputs = 3, k->inputs[2].dtype = BURNC_DTYPE_F32; break;
        case 19: k->stores[0].value = 2; break;
        case 20: k->n_outputs = 3, k->outputs[2].dtype = BURNC_DTYPE_I32; break;
        case 21: kt_stage(&t, KIR_COMBINE_SUM, 0); break;
        case 22: k->insts[3].a = 1; break;
        case 23: k->insts[0].imm.i = 1; break;
        case 24: k->insts[2].op = KIR_DIV; break;
        case 25: k->inputs[0].dtype = BURNC_DTYPE_F64; break;
        case 26: k->stages[0].combiner = KIR_COMBINE_PROD; break;
        case 27: k->rank = 1, k->n_outer = 0; break;
        case 28: k->outputs[1].stride[1] = KIR_STRIDE_UNIT; break;
        case 29: k->inputs[1].stride[1] = KIR_STRIDE_UNIT; break;
        }
        h[n++] = kir_hash(k);
        kt_free(&t);
    }
    /* constants that differ only in bits */
    for (int c = 0; c < 3; c++) {
        base_kernel(&t, &m);
        const double vals[3] = {0.0, -0.0, 1.0};
        kir_const_f(&t.k, KIR_F64, vals[c]);
        h[n++] = kir_hash(&t.k);
        kt_free(&t);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            cr_assert_neq(h[i], h[j], "variants %d and %d hash alike", i - 1, j - 1);
    BT_LEAK_CHECK();
}

/* ---- Philox and the rand recipes --------------------------------------------------------- */

/* A rank-1 kernel over n counters offset + i under `key` (scalar arguments 0 and 1). */
static void philox_words(uint64_t key, uint64_t offset, int n, int32_t *w /* [4][n] */, int32_t *single /* [n] */,
                         int word)
{
    const int64_t ext[1] = {n};
    kt t;
    kt_init(&t, 1, 1, ext);
    t.k.n_scalars = 2;
    t.sc[0].u = key;
    t.sc[1].u = offset;
    kir_kernel *k = &t.k;
    int32_t kk = emit(&t, KIR_ARG, KIR_U64, 0, -1, -1);
    int32_t off = emit(&t, KIR_ARG, KIR_U64, 1, -1, -1);
    int32_t ctr = emit(&t, KIR_ADD, KIR_U64, off, emit(&t, KIR_CONVERT, KIR_U64, emit(&t, KIR_INDEX, KIR_I64, 0, -1, -1), -1, -1), -1);
    int32_t out[4];
    cr_assert(kir_philox_block(k, ctr, kk, out));
    for (int j = 0; j < 4; j++) {
        int o = kt_out(&t, BURNC_DTYPE_I32, w + j * n, 0, NULL);
        kt_store(&t, o, emit(&t, KIR_BITCAST, KIR_I32, out[j], -1, -1), false);
    }
    int o = kt_out(&t, BURNC_DTYPE_I32, single, 0, NULL);
    int32_t one = kir_philox(k, ctr, kk, word);
    cr_assert_eq(k->insts[one].type, KIR_U32);
    kt_store(&t, o, emit(&t, KIR_BITCAST, KIR_I32, one, -1, -1), false);
    kt_eval(&t);
    kt_free(&t);
}

Test(philox, kernel_words_equal_ir_philox)
{
    static const uint64_t keys[] = {0, 1, UINT64_C(0xdeadbeefcafef00d), UINT64_MAX};
    static const uint64_t offs[] = {0, UINT64_C(0xfffffff0), UINT64_C(0x123456789), UINT64_MAX - 10};
    enum { N = 40 };
    int32_t w[4 * N], single[N];
    for (size_t a = 0; a < COUNT(keys); a++)
        for (size_t b = 0; b < COUNT(offs); b++) {
            int word = (int)((a + b) % 4);
            philox_words(keys[a], offs[b], N, w, single, word);
            for (int i = 0; i < N; i++) {
                uint32_t want[4];
                ir_philox4x32(offs[b] + (uint64_t)i, keys[a], want);
                for (int j = 0; j < 4; j++)
                    cr_assert_eq((uint32_t)w[j * N + i], want[j], "key %llx counter %llx word %d: %08x vs %08x",
                                 (unsigned long long)keys[a], (unsigned long long)(offs[b] + (uint64_t)i), j,
                                 (uint32_t)w[j * N + i], want[j]);
                cr_assert_eq((uint32_t)single[i], want[word]);
            }
        }
    BT_LEAK_CHECK();
}

/* Element i of a rand or randn draw of dtype dt, as the kernel stores it into dt; offset is
 * an I64 argument here (converted to U64 by the builder) and the index is INDEX 0. */
static void *rand_kernel(bool normal, burnc_dtype_t dt, uint64_t key, uint64_t offset, int n)
{
    burnc_dtype_t od = ir_dtype_is_float(dt) ? dt : BURNC_DTYPE_F32;
    void *out = make_buf(od, NULL, n);
    const int64_t ext[1] = {n};
    kt t;
    kt_init(&t, 1, 1, ext);
    t.k.n_scalars = 2;
    t.sc[0].u = key;
    t.sc[1].u = offset;
    int32_t kk = emit(&t, KIR_ARG, KIR_U64, 0, -1, -1), off = emit(&t, KIR_ARG, KIR_I64, 1, -1, -1);
    int32_t idx = emit(&t, KIR_INDEX, KIR_I64, 0, -1, -1);
    int32_t v = normal ? kir_rand_normal(&t.k, kk, off, idx, dt) : kir_rand_uniform(&t.k, kk, off, idx, dt);
    cr_assert_eq(t.k.insts[v].type, normal || dt == BURNC_DTYPE_F64 ? KIR_F64 : KIR_F32);
    if (normal && od == BURNC_DTYPE_F32) /* randn is computed in F64 and rounded once */
        v = emit(&t, KIR_CONVERT, KIR_F32, v, -1, -1);
    kt_store(&t, kt_out(&t, od, out, 0, NULL), v, false);
    kt_eval(&t);
    kt_free(&t);
    return out;
}

Test(philox, rand_uniform_bitwise)
{
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                        BURNC_DTYPE_I32};
    enum { N = 3000 };
    for (size_t d = 0; d < COUNT(dts); d++) {
        burnc_dtype_t od = ir_dtype_is_float(dts[d]) ? dts[d] : BURNC_DTYPE_F32;
        void *got = rand_kernel(false, dts[d], 1234567, UINT64_C(0xfffffffffffff000), N);
        void *want = make_buf(od, NULL, N);
        for (int i = 0; i < N; i++)
            ir_store_f((char *)want + i * ir_dtype_size(od), od,
                       ir_rand_uniform(1234567, UINT64_C(0xfffffffffffff000), (uint64_t)i, dts[d]));
        expect_same(od, got, want, N, "rand", NULL, NULL);
        for (int i = 0; i < N; i++) {
            double v = get_f(got, od, i);
            cr_assert(v >= 0 && v < 1);
        }
        free(got);
        free(want);
    }
    BT_LEAK_CHECK();
}

/* randn: the bound kernel_ops.h documents, 8 ulp(|z|) + 8e-15 in f64, where ref is
 * ir_rand_normal (double precision); f32 results are that F64 value rounded once, so they are
 * within one f32 ulp of the reference and almost always equal to it. */
Test(philox, rand_normal_within_documented_bound)
{
    enum { N = 5000 };
    for (int f = 0; f < 2; f++) {
        burnc_dtype_t dt = f ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
        void *got = rand_kernel(true, dt, 77, 1000, N);
        double ulp1 = f ? 8 * DBL_EPSILON : FLT_EPSILON, abs_tol = f ? 8e-15 : 0;
        double sum = 0, sq = 0;
        int equal = 0;
        for (int i = 0; i < N; i++) {
            double z = get_f(got, dt, i), ref = ir_scalar_to_dtype(ir_rand_normal(77, 1000, (uint64_t)i, dt), dt);
            cr_assert(fabs(z - ref) <= ulp1 * fabs(ref) + abs_tol, "%s randn[%d]: %.17g vs %.17g",
                      ir_dtype_name(dt), i, z, ref);
            equal += z == ref;
            sum += z;
            sq += z * z;
        }
        if (!f)
            cr_assert(equal >= N - 5, "only %d of %d f32 randn values equal the reference", equal, N);
        cr_assert(fabs(sum / N) < 0.1 && fabs(sq / N - 1) < 0.1, "mean %g, second moment %g", sum / N, sq / N);
        free(got);
    }
    /* f16: the F64 value rounded once, as the reference rounds its double */
    void *h = rand_kernel(true, BURNC_DTYPE_F16, 77, 1000, N);
    for (int i = 0; i < N; i++) {
        double z = get_f(h, BURNC_DTYPE_F16, i), ref = ir_scalar_to_dtype(ir_rand_normal(77, 1000, (uint64_t)i, BURNC_DTYPE_F16), BURNC_DTYPE_F16);
        cr_assert(fabs(z - ref) <= 0x1p-10 * fabs(ref) + 0x1p-14, "f16 randn[%d]: %g vs %g", i, z, ref);
    }
    free(h);
    BT_LEAK_CHECK();
}

/* ---- Listing and failures ---------------------------------------------------------------- */

Test(kernel, print_lists_everything)
{
    kt t;
    base_bufs m;
    base_kernel(&t, &m);
    kir_const_f(&t.k, KIR_F64, 2.5);
    kir_round(&t.k, 0, KIR_BF16);
    char *s = kir_print(&t.k);
    cr_assert_not_null(s);
    static const char *const want[] = {"kernel base: rank 2, 1 outer", "in0 f32 [s1]", "in1 f32 [10]",
                                       "%0 = load.f32 in0", "%2 = mul.f32 %0, %1", "%3 = reduced.f32 stage0",
                                       "%6 = const.f64 2.5", "%7 = round.f32 %0 to bf16", "stage0 = sum %2",
                                       "out0 <- %5\n", "out1 <- %4 (row)"};
    for (size_t i = 0; i < COUNT(want); i++)
        cr_assert(strstr(s, want[i]), "listing lacks \"%s\":\n%s", want[i], s);
    free(s);
    kt_free(&t);
    BT_LEAK_CHECK();
}

Test(kernel, eval_refuses_bad_launches)
{
    kt t;
    base_bufs m;
    base_kernel(&t, &m);
    burnc_error_clear();
    cr_assert_eq(kir_eval(&t.k, NULL), BURNC_ERR_INTERNAL);
    cr_assert_eq(kir_eval(NULL, NULL), BURNC_ERR_INTERNAL);
    kir_args a = kt_args(&t);
    t.ext[1] = -1;
    cr_assert_eq(kir_eval(&t.k, &a), BURNC_ERR_INTERNAL);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INTERNAL, "launch arguments");
    t.ext[1] = 3;
    t.in[0] = NULL;
    cr_assert_eq(kir_eval(&t.k, &a), BURNC_ERR_INTERNAL);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INTERNAL, "no buffer");
    t.ext[0] = 0; /* no rows: nothing is read, a missing buffer is fine */
    burnc_error_clear();
    cr_assert_eq(kir_eval(&t.k, &a), BURNC_OK);
    t.ext[0] = INT64_MAX, t.ext[1] = 4;
    cr_assert_eq(kir_eval(&t.k, &a), BURNC_ERR_INTERNAL);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_INTERNAL, "overflow");
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* ---- Kernels as text (ir/kernel_io.c) ---------------------------------------------------- */

/* The launch layout a kt describes, with its first n_scalars scalars. */
static kir_layout io_layout(const kt *t, int n_scalars)
{
    kir_layout l;
    memset(&l, 0, sizeof l);
    memcpy(l.extents, t->ext, sizeof l.extents);
    memcpy(l.in_offsets, t->in_off, sizeof l.in_offsets);
    memcpy(l.in_strides, t->in_str, sizeof l.in_strides);
    memcpy(l.out_offsets, t->out_off, sizeof l.out_offsets);
    memcpy(l.out_strides, t->out_str, sizeof l.out_strides);
    l.n_scalars = n_scalars;
    for (int s = 0; s < n_scalars && s < 16; s++)
        l.scalars[s] = t->sc[s];
    return l;
}

static void io_expect_slots(const kir_slot *a, const kir_slot *b, int n, int rank, const char *kind)
{
    for (int s = 0; s < n; s++) {
        cr_assert_eq(a[s].dtype, b[s].dtype, "%s %d dtype", kind, s);
        for (int d = 0; d < rank; d++)
            cr_assert_eq(a[s].stride[d], b[s].stride[d], "%s %d stride class %d", kind, s, d);
    }
}

/* Decoded and original kernels and layouts are equal field by field. */
static void io_expect_same(const kir_kernel *a, const kir_layout *la, const kir_kernel *b, const kir_layout *lb)
{
    cr_assert_eq(kir_hash(a), kir_hash(b));
    cr_assert(a->rank == b->rank && a->n_outer == b->n_outer && a->n_scalars == b->n_scalars);
    cr_assert(a->n_inputs == b->n_inputs && a->n_outputs == b->n_outputs);
    io_expect_slots(a->inputs, b->inputs, a->n_inputs, a->rank, "input");
    io_expect_slots(a->outputs, b->outputs, a->n_outputs, a->rank, "output");
    cr_assert_eq(memcmp(a->in_place, b->in_place, sizeof a->in_place), 0, "in_place");
    cr_assert_eq(a->n_stages, b->n_stages);
    for (int s = 0; s < a->n_stages; s++)
        cr_assert(a->stages[s].combiner == b->stages[s].combiner && a->stages[s].value == b->stages[s].value);
    cr_assert_eq(a->n_stores, b->n_stores);
    for (int s = 0; s < a->n_stores; s++)
        cr_assert(a->stores[s].slot == b->stores[s].slot && a->stores[s].value == b->stores[s].value &&
                  a->stores[s].row == b->stores[s].row, "store %d", s);
    cr_assert_eq(a->n_insts, b->n_insts);
    cr_assert((b->insts || !b->n_insts) && b->cap_insts >= b->n_insts, "array %d of %d", b->n_insts,
              b->cap_insts);
    for (int i = 0; i < a->n_insts; i++) {
        const kir_inst *x = &a->insts[i], *y = &b->insts[i];
        cr_assert(x->op == y->op && x->type == y->type && x->a == y->a && x->b == y->b && x->c == y->c &&
                  x->imm.u == y->imm.u, "instruction %d", i);
    }
    cr_assert_str_eq(a->name, b->name);
    for (int d = 0; d < a->rank; d++)
        cr_assert_eq(la->extents[d], lb->extents[d]);
    for (int s = 0; s < a->n_inputs; s++) {
        cr_assert_eq(la->in_offsets[s], lb->in_offsets[s]);
        for (int d = 0; d < a->rank; d++)
            cr_assert_eq(la->in_strides[s * a->rank + d], lb->in_strides[s * a->rank + d]);
    }
    for (int s = 0; s < a->n_outputs; s++) {
        cr_assert_eq(la->out_offsets[s], lb->out_offsets[s]);
        for (int d = 0; d < a->rank; d++)
            cr_assert_eq(la->out_strides[s * a->rank + d], lb->out_strides[s * a->rank + d]);
    }
    cr_assert_eq(la->n_scalars, lb->n_scalars);
    for (int s = 0; s < la->n_scalars; s++)
        cr_assert_eq(la->scalars[s].u, lb->scalars[s].u, "scalar %d bits", s);
}

/* Encodes (twice: the same text), decodes, compares, and re-encodes to the same text. */
static void io_round_trip(const kir_kernel *k, const kir_layout *l)
{
    char why[256];
    cr_assert(kir_valid(k, why, sizeof why), "test kernel invalid: %s", why);
    char *text = kir_encode(k, l), *again = kir_encode(k, l);
    cr_assert(text && again);
    cr_assert_str_eq(text, again, "not deterministic");
    cr_assert_eq(strncmp(text, "kir1:", 5), 0, "%.20s", text);
    cr_assert(strspn(text + 5, "0123456789abcdef") == strlen(text + 5) && strlen(text) % 2 == 1);
    kir_kernel d;
    kir_layout dl;
    cr_assert(kir_decode(text, &d, &dl, why, sizeof why), "decode: %s", why);
    cr_assert_str_empty(why);
    io_expect_same(k, l, &d, &dl);
    char *re = kir_encode(&d, &dl);
    cr_assert(re);
    cr_assert_str_eq(re, text);
    free(re), free(again), free(text);
    kir_free(&d);
}

/* Rank 3, element-wise: f16 dense, bf16 broadcast on axis 0 with a runtime stride, u8
 * broadcast on two axes, i64 with an offset and negative strides; f16 and i64 outputs. */
static void io_elementwise(kt *t)
{
    const int64_t ext[3] = {2, 3, 5};
    kt_init(t, 3, 3, ext);
    int a = kt_in(t, BURNC_DTYPE_F16, NULL, 0, NULL);
    int b = kt_in(t, BURNC_DTYPE_BF16, NULL, 7, (const int64_t[]){0, 10, 1});
    int c = kt_in(t, BURNC_DTYPE_U8, NULL, 0, (const int64_t[]){0, 1, 0});
    int e = kt_in(t, BURNC_DTYPE_I64, NULL, 40, (const int64_t[]){-15, -5, -1});
    int oh = kt_out(t, BURNC_DTYPE_F16, NULL, 0, NULL);
    int oi = kt_out(t, BURNC_DTYPE_I64, NULL, 3, (const int64_t[]){1, 2, 6});
    kir_kernel *k = &t->k;
    int32_t s = kir_emit(k, KIR_ADD, KIR_F32, kt_load(t, a), kt_load(t, b), -1);
    int32_t cu = kir_emit(k, KIR_CONVERT, KIR_F32, kt_load(t, c), -1, -1);
    s = kir_round(k, kir_emit(k, KIR_MUL, KIR_F32, s, cu, -1), KIR_F16);
    int32_t li = kt_load(t, e);
    kt_store(t, oh, kir_emit(k, KIR_FMA, KIR_F32, s, kir_const_f(k, KIR_F32, -0.0), kir_const_f(k, KIR_F32, NAN)),
             false);
    kt_store(t, oi, kir_emit(k, KIR_SHR, KIR_I64, li, kir_const_i(k, KIR_I64, INT64_MIN), -1), false);
    snprintf(k->name, sizeof k->name, "fused_add_mul_fma");
}

/* Rank 2, one outer axis: max, sum of exp(x - max) (many instructions: the array grows) and
 * argmax stages; row stores of the sum and the argmax, an element store of tanh(softmax) in
 * bf16. */
static void io_rows(kt *t)
{
    const int64_t ext[2] = {4, 9};
    kt_init(t, 2, 1, ext);
    int x = kt_in(t, BURNC_DTYPE_F32, NULL, 0, NULL);
    int os = kt_out(t, BURNC_DTYPE_F32, NULL, 0, (const int64_t[]){1, 0});
    int oa = kt_out(t, BURNC_DTYPE_I64, NULL, 5, (const int64_t[]){3, 0});
    int oe = kt_out(t, BURNC_DTYPE_BF16, NULL, 0, NULL);
    int32_t lx = kt_load(t, x);
    int s0 = kt_stage(t, KIR_COMBINE_MAX, lx);
    int32_t ex = kir_exp(&t->k, kir_emit(&t->k, KIR_SUB, KIR_F32, lx, kt_reduced(t, s0), -1));
    int32_t sum = kt_reduced(t, kt_stage(t, KIR_COMBINE_SUM, ex));
    int32_t am = kt_reduced(t, kt_stage(t, KIR_COMBINE_ARGMAX, lx));
    kt_store(t, os, sum, true);
    kt_store(t, oa, am, true);
    kt_store(t, oe, kir_tanh(&t->k, kir_emit(&t->k, KIR_DIV, KIR_F32, ex, sum, -1)), false);
    memset(t->k.name, 'x', sizeof t->k.name - 1); /* the longest name */
    memcpy(t->k.name, "softmax", 7);
}

/* Rank 1, output 0 written in place of input 1; three scalar arguments. */
static void io_in_place(kt *t)
{
    const int64_t ext[1] = {6};
    kt_init(t, 1, 1, ext);
    kt_in(t, BURNC_DTYPE_F64, NULL, 0, NULL);
    int x = kt_in(t, BURNC_DTYPE_F64, NULL, 2, NULL);
    int o = kt_out(t, BURNC_DTYPE_F64, NULL, 2, NULL);
    kir_kernel *k = &t->k;
    k->n_scalars = 3;
    int32_t v = kir_emit(k, KIR_MUL, KIR_F64, kt_load(t, x), kir_emit(k, KIR_ARG, KIR_F64, 0, -1, -1), -1);
    v = kir_emit(k, KIR_ADD, KIR_F64, v, kir_emit(k, KIR_ARG, KIR_F64, 1, -1, -1), -1);
    v = kir_emit(k, KIR_SELECT, KIR_F64, kir_emit(k, KIR_ARG, KIR_BOOL, 2, -1, -1), v, kt_load(t, 0));
    kt_store(t, o, v, false);
    k->in_place[o] = (uint8_t)(1 + x);
    t->sc[0].u = UINT64_C(0x7ff8000000000123); /* a NaN with a payload */
    t->sc[1].u = UINT64_C(0x8000000000000000); /* -0.0 */
    t->sc[2].i = -1;
}

Test(kernel, io_round_trips)
{
    kt t;
    io_elementwise(&t);
    kir_layout l = io_layout(&t, 0);
    t.k.inputs[0].stride[6] = KIR_STRIDE_ANY; /* beyond the rank: not structure, not written */
    io_round_trip(&t.k, &l);
    kt_free(&t);

    io_rows(&t);
    cr_assert(t.k.n_insts > 64, "only %d instructions", t.k.n_insts);
    l = io_layout(&t, 0);
    io_round_trip(&t.k, &l);
    kt_free(&t);

    io_in_place(&t);
    l = io_layout(&t, 3);
    io_round_trip(&t.k, &l);
    /* a layout may carry more scalars than the kernel reads */
    l.n_scalars = 64;
    l.scalars[63].u = UINT64_C(0xfff0000000000001);
    io_round_trip(&t.k, &l);
    kt_free(&t);

    base_bufs m;
    base_kernel(&t, &m);
    l = io_layout(&t, 0);
    io_round_trip(&t.k, &l);
    t.k.name[0] = '\0';
    io_round_trip(&t.k, &l);
    kt_free(&t);

    kir_kernel empty; /* rank 0, nothing at all */
    kir_init(&empty, 0, 0);
    memset(&l, 0, sizeof l);
    io_round_trip(&empty, &l);
    kir_free(&empty);
    BT_LEAK_CHECK();
}

/* The name is in the text but not in the hash; the layout is in the text. */
Test(kernel, io_text_sees_name_and_layout)
{
    kt t;
    io_elementwise(&t);
    kir_layout l = io_layout(&t, 0);
    char *a = kir_encode(&t.k, &l);
    snprintf(t.k.name, sizeof t.k.name, "other");
    char *b = kir_encode(&t.k, &l);
    l.in_strides[1 * 3 + 1] = 11;
    char *c = kir_encode(&t.k, &l);
    cr_assert(a && b && c);
    cr_assert(strcmp(a, b) != 0 && strcmp(b, c) != 0);
    kir_kernel ka, kb;
    kir_layout la, lb;
    char why[256];
    cr_assert(kir_decode(a, &ka, &la, why, sizeof why) && kir_decode(b, &kb, &lb, why, sizeof why), "%s", why);
    cr_assert_eq(kir_hash(&ka), kir_hash(&kb));
    cr_assert_str_eq(kb.name, "other");
    kir_free(&ka), kir_free(&kb);
    free(a), free(b), free(c);
    kt_free(&t);
    BT_LEAK_CHECK();
}

Test(kernel, io_encode_refuses)
{
    kt t;
    base_bufs m;
    base_kernel(&t, &m);
    kir_layout l = io_layout(&t, 0);
    t.k.insts[2].b = 4; /* invalid */
    cr_assert_null(kir_encode(&t.k, &l));
    t.k.insts[2].b = 1;
    char *ok = kir_encode(&t.k, &l);
    cr_assert_not_null(ok);
    free(ok);
    l.n_scalars = 65;
    cr_assert_null(kir_encode(&t.k, &l));
    l.n_scalars = -1;
    cr_assert_null(kir_encode(&t.k, &l));
    l.n_scalars = 0;
    t.k.n_scalars = 65; /* valid for kir_valid, but no layout could hold its scalars */
    cr_assert_null(kir_encode(&t.k, &l));
    cr_assert_null(kir_encode(NULL, &l));
    cr_assert_null(kir_encode(&t.k, NULL));
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* A failed decode names the problem and leaves the kernel empty. */
static void io_expect_fail(const char *text, const char *reason)
{
    kir_kernel k;
    kir_layout l;
    char why[256] = "untouched";
    memset(&k, 0x5a, sizeof k);
    bool ok = kir_decode(text, &k, &l, why, sizeof why);
    cr_assert(!ok, "\"%.60s\" decoded, expected \"%s\"", text ? text : "(null)", reason);
    cr_assert(strncmp(why, "kir_decode: ", 12) == 0 && strstr(why, reason), "reason \"%s\" lacks \"%s\"", why,
              reason);
    cr_assert(k.insts == NULL && k.n_insts == 0 && k.cap_insts == 0 && k.rank == 0 && k.n_inputs == 0);
    kir_free(&k);
}

/* "kir1:" and the hex of the given bytes. */
static char *io_hex(const uint8_t *b, size_t n)
{
    char *s = malloc(5 + 2 * n + 1);
    cr_assert_not_null(s);
    memcpy(s, "kir1:", 5);
    for (size_t i = 0; i < n; i++)
        snprintf(s + 5 + 2 * i, 3, "%02x", b[i]);
    s[5 + 2 * n] = '\0';
    return s;
}

static void io_bytes_fail(const uint8_t *b, size_t n, const char *reason)
{
    char *s = io_hex(b, n);
    io_expect_fail(s, reason);
    free(s);
}

Test(kernel, io_decode_rejects_bad_text)
{
    io_expect_fail("", "does not start with");
    io_expect_fail(NULL, "no text");
    io_expect_fail("kir2:00000000000000000000000000", "does not start with");
    io_expect_fail("KIR1:00000000000000000000000000", "does not start with");
    io_expect_fail("kir1:0000000000000000000000000", "odd number");
    io_expect_fail("kir1:00000000000000g00000000000", "character 19");
    io_expect_fail("kir1:000000000000000000000000A0", "character 29");
    io_expect_fail("kir1:0000000000000000000000 000", "not a lowercase hex digit");
    io_expect_fail("kir1:", "truncated in rank");
    /* the smallest kernel: rank 0, no slots, stages, stores, instructions, name or scalars */
    const uint8_t empty[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    char *s = io_hex(empty, sizeof empty);
    kir_kernel k;
    kir_layout l;
    char why[256];
    cr_assert(kir_decode(s, &k, &l, why, sizeof why), "%s", why);
    cr_assert(k.rank == 0 && k.n_insts == 0 && k.name[0] == '\0' && l.n_scalars == 0);
    kir_free(&k);
    free(s);
    uint8_t b[sizeof empty + 1];
    memcpy(b, empty, sizeof empty);
    b[sizeof empty] = 0;
    io_bytes_fail(b, sizeof empty + 1, "byte 13: 1 trailing bytes");
    /* each count over its bound (byte offsets as laid out in ir/kernel_io.c) */
    static const struct {
        int at;
        uint8_t v;
        const char *reason;
    } over[] = {
        {0, 9, "byte 0: rank 9 exceeds 8"},
        {2, 65, "byte 2: scalar count 65 exceeds 64"},
        {3, 17, "byte 3: input count 17 exceeds 16"},
        {4, 9, "byte 4: output count 9 exceeds 8"},
        {5, 9, "byte 5: stage count 9 exceeds 4"},
        {6, 9, "byte 6: store count 9 exceeds 8"},
        {9, 0x10, "byte 7: instruction count 1048577 exceeds 1048576"}, /* with byte 7 = 1 below */
        {7, 3, "byte 7: 3 instructions need 66 bytes"},
        {11, 64, "byte 11: name length 64 exceeds 63"},
        {12, 65, "byte 12: layout scalar count 65 exceeds 64"},
        {1, 1, "invalid kernel: rank 0 with 1 outer axes"},
    };
    for (size_t i = 0; i < COUNT(over); i++) {
        memcpy(b, empty, sizeof empty);
        b[over[i].at] = over[i].v;
        if (over[i].at == 9)
            b[7] = 1;
        io_bytes_fail(b, sizeof empty, over[i].reason);
    }
    /* a store row flag that is not 0 or 1; a NUL in the name */
    const uint8_t row[] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0};
    io_bytes_fail(row, sizeof row, "byte 15: store row flag is 2");
    const uint8_t name[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 'a', 0, 0};
    io_bytes_fail(name, sizeof name, "byte 13: NUL in the name");
    /* why may be absent or tiny */
    kir_kernel k2;
    cr_assert(!kir_decode("kir1:zz", &k2, &l, NULL, 0));
    cr_assert(!kir_decode("kir1:09", &k2, &l, why, 5));
    cr_assert_str_eq(why, "kir_");
    kir_free(&k2);
    BT_LEAK_CHECK();
}

/* Every prefix of a valid line fails; a trailing byte fails. */
Test(kernel, io_decode_rejects_truncations)
{
    kt t;
    io_in_place(&t);
    kir_layout l = io_layout(&t, 3);
    char *text = kir_encode(&t.k, &l);
    cr_assert_not_null(text);
    size_t n = strlen(text);
    char *cut = malloc(n + 3);
    cr_assert_not_null(cut);
    for (size_t len = 0; len < n; len++) {
        memcpy(cut, text, len);
        cut[len] = '\0';
        io_expect_fail(cut, len < 5         ? "does not start"
                            : (len - 5) % 2 ? "odd number"
                            : len == 5      ? "truncated"
                                            : "byte");
        if (len > 5 && len % 2 == 1) {
            kir_kernel k;
            char why[256];
            cr_assert(!kir_decode(cut, &k, &l, why, sizeof why));
            cr_assert(strstr(why, "truncated") || strstr(why, "instructions need"), "length %zu: %s", len, why);
        }
    }
    snprintf(cut, n + 3, "%s00", text);
    io_expect_fail(cut, "1 trailing bytes");
    free(cut);
    free(text);
    kt_free(&t);
    BT_LEAK_CHECK();
}

/* Damage anywhere fails cleanly or gives a kernel kir_valid accepts: one hex digit changed at
 * each position, and each byte with all its bits flipped. */
static void io_damage(const kir_kernel *k, const kir_layout *l)
{
    char *text = kir_encode(k, l);
    cr_assert_not_null(text);
    size_t n = strlen(text);
    int failed = 0, decoded = 0;
    for (size_t i = 5; i < n; i++)
        for (int mode = 0; mode < 3; mode++) {
            char *bad = strdup(text);
            cr_assert_not_null(bad);
            unsigned v = (unsigned)(bad[i] <= '9' ? bad[i] - '0' : bad[i] - 'a' + 10);
            if (mode == 2 && (i - 5) % 2) {
                free(bad);
                continue;
            }
            if (mode < 2)
                v ^= mode ? 8u : 1u;
            else { /* the whole byte */
                unsigned w = (unsigned)(bad[i + 1] <= '9' ? bad[i + 1] - '0' : bad[i + 1] - 'a' + 10);
                bad[i + 1] = "0123456789abcdef"[w ^ 15u];
                v ^= 15u;
            }
            bad[i] = "0123456789abcdef"[v];
            kir_kernel d;
            kir_layout dl;
            char why[256] = "";
            if (kir_decode(bad, &d, &dl, why, sizeof why)) {
                char why2[256];
                cr_assert(kir_valid(&d, why2, sizeof why2), "position %zu: decoded an invalid kernel: %s", i, why2);
                decoded++;
            } else {
                cr_assert(strncmp(why, "kir_decode: ", 12) == 0, "position %zu: reason \"%s\"", i, why);
                cr_assert(d.insts == NULL && d.n_insts == 0);
                failed++;
            }
            kir_free(&d);
            free(bad);
        }
    cr_assert(failed > 0 && decoded > 0, "%d failed, %d decoded", failed, decoded);
    free(text);
}

Test(kernel, io_decode_survives_damage)
{
    kt t;
    io_elementwise(&t);
    kir_layout l = io_layout(&t, 0);
    io_damage(&t.k, &l);
    kt_free(&t);
    io_in_place(&t);
    l = io_layout(&t, 3);
    io_damage(&t.k, &l);
    kt_free(&t);
    base_bufs m;
    base_kernel(&t, &m);
    l = io_layout(&t, 0);
    io_damage(&t.k, &l);
    kt_free(&t);
    BT_LEAK_CHECK();
}
