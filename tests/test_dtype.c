/* Dtypes, conversions, the scalar semantics of element-wise ops, and Philox. Golden vectors
 * come from numpy through tests/data/gen_dtype.py (found through BURNC_TEST_DATA); the rest
 * are exact values worked out by hand, so each test fails on a wrong bit. */
#include <criterion/criterion.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static const burnc_dtype_t ALL_DTYPES[] = {
    BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
    BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8,  BURNC_DTYPE_BOOL,
};
static const burnc_dtype_t FLOAT_DTYPES[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16,
                                             BURNC_DTYPE_BF16};
static const burnc_dtype_t INT_DTYPES[] = {BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ----------------------------------------------------------------------------- */

static uint64_t bits64(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double from_bits64(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The spacing of doubles at |x| (subnormal spacing below the normal range). */
static double ulp64(double x)
{
    int e;
    frexp(x, &e);
    return ldexp(1.0, (e - 1 < -1022 ? -1022 : e - 1) - 52);
}

/* Opens a golden file; NULL-free: a missing file fails the test with its path. */
static FILE *open_data(const char *name)
{
    const char *dir = getenv("BURNC_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "tests/data", name);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "cannot open golden file %s (set BURNC_TEST_DATA)", path);
    return f;
}

/* The next data line (comments and blank lines skipped); false at the end. */
static bool next_line(FILE *f, char *buf, size_t size)
{
    while (fgets(buf, (int)size, f)) {
        if (buf[0] != '#' && buf[0] != '\n')
            return true;
    }
    return false;
}

/* An integer as dt stores it: the caller-side wrap the scalar functions leave to callers. */
static int64_t wrap_to(burnc_dtype_t dt, int64_t v)
{
    unsigned char buf[8];
    ir_store_i(buf, dt, v);
    return ir_load_i(buf, dt);
}

static burnc_dtype_t dtype_by_name(const char *name)
{
    for (size_t i = 0; i < COUNT(ALL_DTYPES); i++)
        if (strcmp(ir_dtype_name(ALL_DTYPES[i]), name) == 0)
            return ALL_DTYPES[i];
    cr_assert_fail("unknown dtype %s in golden data", name);
    return BURNC_DTYPE_DEFAULT;
}

/* ---- the table --------------------------------------------------------------------------- */

Test(dtype, sizes_names_kinds)
{
    static const struct {
        burnc_dtype_t dt;
        size_t size;
        const char *name;
        bool is_float, is_int;
    } want[] = {
        {BURNC_DTYPE_F32, 4, "f32", true, false},  {BURNC_DTYPE_F64, 8, "f64", true, false},
        {BURNC_DTYPE_F16, 2, "f16", true, false},  {BURNC_DTYPE_BF16, 2, "bf16", true, false},
        {BURNC_DTYPE_I32, 4, "i32", false, true},  {BURNC_DTYPE_I64, 8, "i64", false, true},
        {BURNC_DTYPE_U8, 1, "u8", false, true},    {BURNC_DTYPE_BOOL, 1, "bool", false, false},
    };
    for (size_t i = 0; i < COUNT(want); i++) {
        cr_assert(ir_dtype_valid(want[i].dt));
        cr_assert_eq(ir_dtype_size(want[i].dt), want[i].size);
        cr_assert_eq(burnc_dtype_size(want[i].dt), want[i].size);
        cr_assert_str_eq(ir_dtype_name(want[i].dt), want[i].name);
        cr_assert_str_eq(burnc_dtype_name(want[i].dt), want[i].name);
        cr_assert_eq(ir_dtype_is_float(want[i].dt), want[i].is_float, "%s", want[i].name);
        cr_assert_eq(ir_dtype_is_int(want[i].dt), want[i].is_int, "%s", want[i].name);
    }
    const burnc_dtype_t bad[] = {BURNC_DTYPE_DEFAULT, (burnc_dtype_t)9, (burnc_dtype_t)-1};
    for (size_t i = 0; i < COUNT(bad); i++) {
        cr_assert_not(ir_dtype_valid(bad[i]));
        cr_assert_eq(ir_dtype_size(bad[i]), 0);
        cr_assert_str_eq(ir_dtype_name(bad[i]), "invalid");
        cr_assert_not(ir_dtype_is_float(bad[i]));
        cr_assert_not(ir_dtype_is_int(bad[i]));
    }
}

Test(dtype, promotion_table)
{
    /* Rows and columns in the order of ALL_DTYPES: f32 f64 f16 bf16 i32 i64 u8 bool. */
    enum { F32 = BURNC_DTYPE_F32, F64 = BURNC_DTYPE_F64, F16 = BURNC_DTYPE_F16,
           BF16 = BURNC_DTYPE_BF16, I32 = BURNC_DTYPE_I32, I64 = BURNC_DTYPE_I64,
           U8 = BURNC_DTYPE_U8, BOOL = BURNC_DTYPE_BOOL };
    static const int want[8][8] = {
        /*          f32  f64  f16   bf16  i32   i64   u8    bool */
        /* f32  */ {F32, F64, F32,  F32,  F32,  F32,  F32,  F32},
        /* f64  */ {F64, F64, F64,  F64,  F64,  F64,  F64,  F64},
        /* f16  */ {F32, F64, F16,  F32,  F16,  F16,  F16,  F16},
        /* bf16 */ {F32, F64, F32,  BF16, BF16, BF16, BF16, BF16},
        /* i32  */ {F32, F64, F16,  BF16, I32,  I64,  I32,  I32},
        /* i64  */ {F32, F64, F16,  BF16, I64,  I64,  I64,  I64},
        /* u8   */ {F32, F64, F16,  BF16, I32,  I64,  U8,   U8},
        /* bool */ {F32, F64, F16,  BF16, I32,  I64,  U8,   BOOL},
    };
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 8; c++)
            cr_assert_eq(ir_promote(ALL_DTYPES[r], ALL_DTYPES[c]), (burnc_dtype_t)want[r][c],
                         "promote(%s, %s)", ir_dtype_name(ALL_DTYPES[r]),
                         ir_dtype_name(ALL_DTYPES[c]));
    cr_assert_eq(ir_promote(BURNC_DTYPE_DEFAULT, BURNC_DTYPE_F32), BURNC_DTYPE_DEFAULT);
    cr_assert_eq(ir_promote(BURNC_DTYPE_I32, (burnc_dtype_t)9), BURNC_DTYPE_DEFAULT);
}

/* ---- f16 and bf16 ------------------------------------------------------------------------ */

/* The value of a binary16 pattern by its definition, independent of the library's bit
 * assembly. */
static double f16_by_definition(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* bfloat16 is the top half of a binary32, so the hardware decodes it for us. */
static double bf16_by_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void check_roundtrip(const char *fmt_name, uint16_t h, double d, uint16_t back,
                            uint16_t exp_mask, uint16_t quiet_bit, double want)
{
    bool is_nan = (h & exp_mask) == exp_mask && (h & ~exp_mask & 0x7fff) != 0;
    if (is_nan) {
        cr_assert(isnan(d), "%s %04x should decode to NaN", fmt_name, h);
        cr_assert_eq(!!signbit(d), !!(h & 0x8000), "%s %04x NaN sign", fmt_name, h);
        /* Back as a quiet NaN of the same sign and payload. */
        cr_assert_eq(back, h | quiet_bit, "%s %04x came back as %04x", fmt_name, h, back);
        return;
    }
    cr_assert_eq(bits64(d), bits64(want), "%s %04x decoded to %a, want %a", fmt_name, h, d, want);
    cr_assert_eq(back, h, "%s %04x -> %a -> %04x", fmt_name, h, d, back);
}

Test(f16, every_pattern_roundtrips)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        double d = ir_f16_to_f64((uint16_t)h);
        check_roundtrip("f16", (uint16_t)h, d, ir_f64_to_f16(d), 0x7c00, 0x0200,
                        (h & 0x7c00) == 0x7c00 ? (h & 0x8000 ? -INFINITY : INFINITY)
                                               : f16_by_definition((uint16_t)h));
        float f = burnc_f16_to_f32((uint16_t)h);
        if (!isnan(d)) {
            cr_assert_eq((double)f, d, "burnc_f16_to_f32(%04x)", h);
            cr_assert_eq(burnc_f32_to_f16(f), h, "burnc_f32_to_f16(%a)", (double)f);
        }
    }
}

Test(bf16, every_pattern_roundtrips)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        double d = ir_bf16_to_f64((uint16_t)h);
        check_roundtrip("bf16", (uint16_t)h, d, ir_f64_to_bf16(d), 0x7f80, 0x0040,
                        bf16_by_f32((uint16_t)h));
        float f = burnc_bf16_to_f32((uint16_t)h);
        if (!isnan(d)) {
            cr_assert_eq((double)f, d, "burnc_bf16_to_f32(%04x)", h);
            cr_assert_eq(burnc_f32_to_bf16(f), h, "burnc_f32_to_bf16(%a)", (double)f);
        }
    }
}

/* Each line: f64 bits, expected 16-bit pattern. NaN inputs must give a NaN of the same sign
 * (payload rules differ between numpy and hardware); everything else must match bit for bit. */
static void check_golden_narrow(const char *file, uint16_t (*conv)(double), uint16_t exp_mask)
{
    FILE *f = open_data(file);
    char line[256];
    int n = 0;
    while (next_line(f, line, sizeof line)) {
        uint64_t xb;
        unsigned want;
        cr_assert_eq(sscanf(line, "%" SCNx64 " %x", &xb, &want), 2, "%s: bad line %s", file, line);
        double x = from_bits64(xb);
        uint16_t got = conv(x);
        if (isnan(x)) {
            cr_assert((got & exp_mask) == exp_mask && (got & ~exp_mask & 0x7fff) != 0,
                      "%s: %a gave %04x, not a NaN", file, x, got);
            cr_assert_eq(got & 0x8000, want & 0x8000, "%s: NaN sign", file);
        } else {
            cr_assert_eq(got, want, "%s: %a (%016" PRIx64 ") gave %04x, want %04x", file, x, xb,
                         got, want);
        }
        n++;
    }
    fclose(f);
    cr_assert_gt(n, 1000, "%s: only %d vectors", file, n);
}

Test(f16, rounding_matches_numpy)
{
    check_golden_narrow("dtype_f16.txt", ir_f64_to_f16, 0x7c00);
}

Test(bf16, rounding_matches_golden)
{
    check_golden_narrow("dtype_bf16.txt", ir_f64_to_bf16, 0x7f80);
}

/* The cases that matter most, worked out by hand, so they are checked even without data. */
Test(f16, rounding_by_hand)
{
    static const struct {
        double x;
        uint16_t want;
    } cases[] = {
        {0.0, 0x0000}, {-0.0, 0x8000}, {1.0, 0x3c00}, {-2.0, 0xc000},
        {1.0 + 0x1p-11, 0x3c00},                /* tie, even below */
        {1.0 + 3 * 0x1p-11, 0x3c02},            /* tie, even above */
        {1.0 + 0x1p-11 + 0x1p-40, 0x3c01},      /* above the tie: rounding via f32 would miss it */
        {65504.0, 0x7bff}, {65519.99999999999, 0x7bff}, {65520.0, 0x7c00}, {1e300, 0x7c00},
        {-65520.0, 0xfc00}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
        {0x1p-24, 0x0001}, {0x1p-25, 0x0000},   /* half the smallest subnormal: tie to 0 */
        {0x1.0000000000001p-25, 0x0001}, {3 * 0x1p-25, 0x0002}, {-0x1p-26, 0x8000},
        {0x1p-14, 0x0400}, {0x1p-14 - 0x1p-25, 0x0400}, /* subnormal tie rounds up to normal */
        {0x1p-14 - 0x1p-24, 0x03ff}, {4.9e-324, 0x0000},
    };
    for (size_t i = 0; i < COUNT(cases); i++)
        cr_assert_eq(ir_f64_to_f16(cases[i].x), cases[i].want, "f16(%a) = %04x, want %04x",
                     cases[i].x, ir_f64_to_f16(cases[i].x), cases[i].want);
    cr_assert_eq(ir_f64_to_f16(NAN), 0x7e00);
    cr_assert_eq(ir_f64_to_f16(-NAN), 0xfe00);
    cr_assert_eq(burnc_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(burnc_f32_to_f16(0x1p-25f), 0x0000);
}

Test(bf16, rounding_by_hand)
{
    static const struct {
        double x;
        uint16_t want;
    } cases[] = {
        {1.0, 0x3f80}, {-0.0, 0x8000}, {1.0 + 0x1p-8, 0x3f80}, {1.0 + 3 * 0x1p-8, 0x3f82},
        {1.0 + 0x1p-8 + 0x1p-40, 0x3f81},
        {0x1.fep127, 0x7f7f}, {0x1.ffp127, 0x7f80}, /* max, and the tie above it */
        {0x1.fefffffffffffp127, 0x7f7f}, {0x1p-133, 0x0001}, {0x1p-134, 0x0000},
        {3 * 0x1p-134, 0x0002}, {0x1p-126, 0x0080}, {1e-300, 0x0000}, {-1e300, 0xff80},
    };
    for (size_t i = 0; i < COUNT(cases); i++)
        cr_assert_eq(ir_f64_to_bf16(cases[i].x), cases[i].want, "bf16(%a) = %04x, want %04x",
                     cases[i].x, ir_f64_to_bf16(cases[i].x), cases[i].want);
    cr_assert_eq(ir_f64_to_bf16(NAN), 0x7fc0);
    cr_assert_eq(ir_f64_to_bf16(-NAN), 0xffc0);
    cr_assert_eq(burnc_f32_to_bf16(0x1.fffffep127f), 0x7f80);
    cr_assert_eq(burnc_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
}

/* ---- loads, stores, casts ---------------------------------------------------------------- */

Test(convert, integer_stores_wrap)
{
    static const struct {
        burnc_dtype_t dt;
        int64_t v, want;
    } cases[] = {
        {BURNC_DTYPE_I32, INT64_C(2147483648), INT32_MIN},
        {BURNC_DTYPE_I32, INT64_C(-2147483649), INT32_MAX},
        {BURNC_DTYPE_I32, INT64_C(4294967301), 5},
        {BURNC_DTYPE_I32, -7, -7},
        {BURNC_DTYPE_I32, INT64_MIN, 0},
        {BURNC_DTYPE_I64, INT64_MIN, INT64_MIN},
        {BURNC_DTYPE_I64, INT64_MAX, INT64_MAX},
        {BURNC_DTYPE_U8, 256, 0},
        {BURNC_DTYPE_U8, -1, 255},
        {BURNC_DTYPE_U8, 511, 255},
        {BURNC_DTYPE_U8, 300, 44},
        {BURNC_DTYPE_U8, -256, 0},
        {BURNC_DTYPE_BOOL, 2, 1},
        {BURNC_DTYPE_BOOL, -1, 1},
        {BURNC_DTYPE_BOOL, 256, 1}, /* != 0, not the low byte */
        {BURNC_DTYPE_BOOL, 0, 0},
    };
    for (size_t i = 0; i < COUNT(cases); i++)
        cr_assert_eq(wrap_to(cases[i].dt, cases[i].v), cases[i].want, "store_i(%s, %" PRId64 ")",
                     ir_dtype_name(cases[i].dt), cases[i].v);
    /* Bytes on storage are what the dtype holds. */
    unsigned char b[8];
    ir_store_i(b, BURNC_DTYPE_U8, -2);
    cr_assert_eq(b[0], 254);
    ir_store_i(b, BURNC_DTYPE_BOOL, 77);
    cr_assert_eq(b[0], 1);
    int32_t i32;
    ir_store_i(b, BURNC_DTYPE_I32, INT64_C(0x1234567890));
    memcpy(&i32, b, sizeof i32);
    cr_assert_eq(i32, 0x34567890);
}

Test(convert, float_to_int_casts)
{
    static const double inputs[] = {NAN, INFINITY, -INFINITY, -0.5, 2.9, -2.9, 3e9, -3e9,
                                    1e19, -1e19, 255.9, 256.0, -0.0, 0x1p63, -0x1p63};
    /* Truncate toward zero, saturate at the dtype's bounds, NaN -> 0; rows follow inputs. */
    static const int64_t want[][3] = {
        /*            i32        i64        u8 */
        /* NaN   */ {0, 0, 0},
        /* inf   */ {INT32_MAX, INT64_MAX, 255},
        /* -inf  */ {INT32_MIN, INT64_MIN, 0},
        /* -0.5  */ {0, 0, 0},
        /* 2.9   */ {2, 2, 2},
        /* -2.9  */ {-2, -2, 0},
        /* 3e9   */ {INT32_MAX, 3000000000, 255},
        /* -3e9  */ {INT32_MIN, -3000000000, 0},
        /* 1e19  */ {INT32_MAX, INT64_MAX, 255},
        /* -1e19 */ {INT32_MIN, INT64_MIN, 0},
        /* 255.9 */ {255, 255, 255},
        /* 256   */ {256, 256, 255},
        /* -0.0  */ {0, 0, 0},
        /* 2^63  */ {INT32_MAX, INT64_MAX, 255},
        /* -2^63 */ {INT32_MIN, INT64_MIN, 0},
    };
    for (size_t i = 0; i < COUNT(inputs); i++) {
        for (size_t j = 0; j < COUNT(INT_DTYPES); j++) {
            unsigned char b[8];
            ir_store_f(b, INT_DTYPES[j], inputs[i]);
            cr_assert_eq(ir_load_i(b, INT_DTYPES[j]), want[i][j], "store_f(%s, %a)",
                         ir_dtype_name(INT_DTYPES[j]), inputs[i]);
            double s = ir_scalar_to_dtype(inputs[i], INT_DTYPES[j]);
            cr_assert_eq(s, (double)want[i][j], "scalar_to_dtype(%a, %s)", inputs[i],
                         ir_dtype_name(INT_DTYPES[j]));
        }
        /* ir_load_i of a float applies the same rules, at int64's bounds. */
        cr_assert_eq(ir_load_i(&inputs[i], BURNC_DTYPE_F64), want[i][1], "load_i(f64 %a)",
                     inputs[i]);
    }
}

Test(convert, bool_and_float_stores)
{
    static const struct {
        double v;
        uint8_t want;
    } bools[] = {{NAN, 1}, {-0.0, 0}, {0.0, 0}, {0.5, 1}, {-INFINITY, 1}, {1e-320, 1}};
    for (size_t i = 0; i < COUNT(bools); i++) {
        unsigned char b = 9;
        ir_store_f(&b, BURNC_DTYPE_BOOL, bools[i].v);
        cr_assert_eq(b, bools[i].want, "bool(%a)", bools[i].v);
        cr_assert_eq(ir_scalar_to_dtype(bools[i].v, BURNC_DTYPE_BOOL), bools[i].want);
    }
    unsigned char seven = 7; /* a non-canonical bool byte still loads as 1 */
    cr_assert_eq(ir_load_i(&seven, BURNC_DTYPE_BOOL), 1);
    cr_assert_eq(ir_load_f(&seven, BURNC_DTYPE_BOOL), 1.0);

    unsigned char b[8];
    ir_store_f(b, BURNC_DTYPE_F32, 0.1);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_F32), (double)0.1f);
    ir_store_f(b, BURNC_DTYPE_F16, 1.0 + 0x1p-11 + 0x1p-40);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_F16), 1.0 + 0x1p-10);
    ir_store_f(b, BURNC_DTYPE_BF16, -3.0);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_BF16), -3.0);
    cr_assert_eq(ir_load_i(b, BURNC_DTYPE_BF16), -3);
    ir_store_f(b, BURNC_DTYPE_F16, 70000.0);
    cr_assert_eq(ir_load_i(b, BURNC_DTYPE_F16), INT64_MAX, "f16 inf loads saturated");
    cr_assert_eq(ir_scalar_to_dtype(0.1, BURNC_DTYPE_F16), 0x1.998p-4);
    cr_assert_eq(ir_scalar_to_dtype(0.1, BURNC_DTYPE_BF16), 0x1.9ap-4);
    cr_assert_eq(ir_scalar_to_dtype(0.1, BURNC_DTYPE_F64), 0.1);

    /* Integers into floats round once: via double, 2^62 + 2^54 + 1 would become a tie and
     * round down to 2^62. */
    ir_store_i(b, BURNC_DTYPE_BF16, (INT64_C(1) << 62) + (INT64_C(1) << 54) + 1);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_BF16), 0x1p62 + 0x1p55);
    ir_store_i(b, BURNC_DTYPE_BF16, INT64_MIN);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_BF16), -0x1p63);
    ir_store_i(b, BURNC_DTYPE_F16, 65520);
    cr_assert(isinf(ir_load_f(b, BURNC_DTYPE_F16)));
    ir_store_i(b, BURNC_DTYPE_F16, 2049); /* tie between 2048 and 2050: even is 2048 */
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_F16), 2048.0);
    ir_store_i(b, BURNC_DTYPE_F16, -2051);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_F16), -2052.0);
    ir_store_i(b, BURNC_DTYPE_F32, (INT64_C(1) << 40) + 1);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_F32), 0x1p40);
    ir_store_i(b, BURNC_DTYPE_F64, INT64_MAX);
    cr_assert_eq(ir_load_f(b, BURNC_DTYPE_F64), 0x1p63);

    int32_t neg = -5;
    cr_assert_eq(ir_load_f(&neg, BURNC_DTYPE_I32), -5.0);
    uint8_t u = 200;
    cr_assert_eq(ir_load_f(&u, BURNC_DTYPE_U8), 200.0);
    cr_assert_eq(ir_load_i(&u, BURNC_DTYPE_U8), 200);
}

/* ---- integer ops ------------------------------------------------------------------------- */

static ir_op int_op_by_name(const char *name)
{
    if (strcmp(name, "div") == 0)
        return IR_OP_DIV;
    if (strcmp(name, "remainder") == 0)
        return IR_OP_REMAINDER;
    cr_assert_str_eq(name, "pow", "unknown op in golden data");
    return IR_OP_POW;
}

Test(int_ops, floor_div_remainder_pow_match_numpy)
{
    FILE *f = open_data("dtype_int_ops.txt");
    char line[256];
    int n = 0;
    while (next_line(f, line, sizeof line)) {
        char dname[8], oname[16];
        int64_t a, b, want;
        cr_assert_eq(sscanf(line, "%7s %15s %" SCNd64 " %" SCNd64 " %" SCNd64, dname, oname, &a,
                            &b, &want), 5, "bad line %s", line);
        burnc_dtype_t dt = dtype_by_name(dname);
        ir_op op = int_op_by_name(oname);
        int64_t got = wrap_to(dt, ir_binary_i(op, a, b, dt));
        cr_assert_eq(got, want, "%s %s(%" PRId64 ", %" PRId64 ") = %" PRId64 ", want %" PRId64,
                     dname, oname, a, b, got, want);
        n++;
    }
    fclose(f);
    cr_assert_gt(n, 1000, "only %d vectors", n);
}

Test(int_ops, division_edges)
{
    const burnc_dtype_t i32 = BURNC_DTYPE_I32, i64 = BURNC_DTYPE_I64, u8 = BURNC_DTYPE_U8;
    cr_assert_eq(wrap_to(i32, ir_binary_i(IR_OP_DIV, INT32_MIN, -1, i32)), INT32_MIN);
    cr_assert_eq(ir_binary_i(IR_OP_REMAINDER, INT32_MIN, -1, i32), 0);
    cr_assert_eq(ir_binary_i(IR_OP_DIV, INT64_MIN, -1, i64), INT64_MIN);
    cr_assert_eq(ir_binary_i(IR_OP_REMAINDER, INT64_MIN, -1, i64), 0);
    cr_assert_eq(ir_binary_i(IR_OP_DIV, 7, 0, i64), 0);
    cr_assert_eq(ir_binary_i(IR_OP_REMAINDER, -7, 0, i32), 0);
    cr_assert_eq(ir_binary_i(IR_OP_DIV, -7, 2, i32), -4);
    cr_assert_eq(ir_binary_i(IR_OP_REMAINDER, -7, 2, i32), 1);
    cr_assert_eq(ir_binary_i(IR_OP_DIV, 7, -2, i64), -4);
    cr_assert_eq(ir_binary_i(IR_OP_REMAINDER, 7, -2, i64), -1);
    cr_assert_eq(ir_binary_i(IR_OP_DIV, -8, -2, i64), 4);
    /* u8 is unsigned: 200 is not -56. */
    cr_assert_eq(ir_binary_i(IR_OP_DIV, 200, 3, u8), 66);
    cr_assert_eq(ir_binary_i(IR_OP_REMAINDER, 200, 7, u8), 4);
    cr_assert_eq(ir_binary_i(IR_OP_LT, 200, 100, u8), 0);
    cr_assert_eq(ir_binary_i(IR_OP_MAXIMUM, 200, 100, u8), 200);
}

Test(int_ops, pow)
{
    const burnc_dtype_t i32 = BURNC_DTYPE_I32, i64 = BURNC_DTYPE_I64, u8 = BURNC_DTYPE_U8;
    cr_assert_eq(ir_binary_i(IR_OP_POW, 3, 4, i64), 81);
    cr_assert_eq(ir_binary_i(IR_OP_POW, -2, 3, i64), -8);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 0, 0, i64), 1);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 2, 63, i64), INT64_MIN);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 2, 64, i64), 0);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 3, 40, i64), INT64_C(-6289078614652622815));
    cr_assert_eq(wrap_to(i32, ir_binary_i(IR_OP_POW, 2, 31, i32)), INT32_MIN);
    cr_assert_eq(wrap_to(i32, ir_binary_i(IR_OP_POW, 3, 40, i32)), 689956897);
    cr_assert_eq(wrap_to(u8, ir_binary_i(IR_OP_POW, 3, 6, u8)), 729 % 256);
    /* Negative exponents: 0, except for bases 1 and -1. */
    cr_assert_eq(ir_binary_i(IR_OP_POW, 2, -1, i64), 0);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 0, -3, i32), 0);
    cr_assert_eq(ir_binary_i(IR_OP_POW, -5, -2, i32), 0);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 1, -5, i64), 1);
    cr_assert_eq(ir_binary_i(IR_OP_POW, -1, -3, i64), -1);
    cr_assert_eq(ir_binary_i(IR_OP_POW, -1, -2, i32), 1);
    cr_assert_eq(ir_binary_i(IR_OP_POW, -1, INT64_MIN, i64), 1);
    cr_assert_eq(ir_binary_i(IR_OP_POW, 1, INT64_MAX, i64), 1);
}

Test(int_ops, wrapping_unary_and_logic)
{
    const burnc_dtype_t i32 = BURNC_DTYPE_I32, i64 = BURNC_DTYPE_I64, u8 = BURNC_DTYPE_U8;
    const burnc_dtype_t bl = BURNC_DTYPE_BOOL;
    cr_assert_eq(ir_unary_i(IR_OP_NEG, INT64_MIN, i64, NULL), INT64_MIN);
    cr_assert_eq(ir_unary_i(IR_OP_ABS, INT64_MIN, i64, NULL), INT64_MIN);
    cr_assert_eq(wrap_to(i32, ir_unary_i(IR_OP_ABS, INT32_MIN, i32, NULL)), INT32_MIN);
    cr_assert_eq(wrap_to(u8, ir_unary_i(IR_OP_NEG, 5, u8, NULL)), 251);
    cr_assert_eq(ir_unary_i(IR_OP_SIGN, -9, i32, NULL), -1);
    cr_assert_eq(ir_unary_i(IR_OP_SIGN, 0, i32, NULL), 0);
    cr_assert_eq(ir_unary_i(IR_OP_SIGN, 255, u8, NULL), 1);
    cr_assert_eq(ir_unary_i(IR_OP_RELU, -3, i64, NULL), 0);
    cr_assert_eq(ir_unary_i(IR_OP_ROUND, -3, i64, NULL), -3);
    cr_assert_eq(ir_unary_i(IR_OP_FLOOR, 7, i32, NULL), 7);
    cr_assert_eq(ir_unary_i(IR_OP_LOGICAL_NOT, 0, i32, NULL), 1);
    cr_assert_eq(ir_unary_i(IR_OP_LOGICAL_NOT, -4, i32, NULL), 0);
    cr_assert_eq(ir_unary_i(IR_OP_EXP, 2, i32, NULL), 0, "float-only ops give 0 on integers");
    cr_assert_eq(ir_binary_i(IR_OP_ATAN2, 1, 1, i32), 0);

    const double lohi[2] = {-2, 5}, inverted[2] = {5, -2};
    const double i64_full[2] = {-0x1p63, 0x1p63}; /* i64's saturated bounds, as doubles */
    cr_assert_eq(ir_unary_i(IR_OP_CLAMP, -9, i32, lohi), -2);
    cr_assert_eq(ir_unary_i(IR_OP_CLAMP, 9, i32, lohi), 5);
    cr_assert_eq(ir_unary_i(IR_OP_CLAMP, 3, i32, lohi), 3);
    cr_assert_eq(ir_unary_i(IR_OP_CLAMP, 0, i32, inverted), -2, "lo > hi gives hi");
    cr_assert_eq(ir_unary_i(IR_OP_CLAMP, INT64_MAX, i64, i64_full), INT64_MAX);
    cr_assert_eq(ir_unary_i(IR_OP_CLAMP, INT64_MIN, i64, i64_full), INT64_MIN);

    cr_assert_eq(ir_binary_i(IR_OP_ADD, INT64_MAX, 1, i64), INT64_MIN);
    cr_assert_eq(ir_binary_i(IR_OP_SUB, INT64_MIN, 1, i64), INT64_MAX);
    cr_assert_eq(ir_binary_i(IR_OP_MUL, INT64_C(1) << 62, 4, i64), 0);
    cr_assert_eq(wrap_to(i32, ir_binary_i(IR_OP_ADD, INT32_MAX, 1, i32)), INT32_MIN);
    cr_assert_eq(wrap_to(u8, ir_binary_i(IR_OP_ADD, 250, 10, u8)), 4);
    cr_assert_eq(ir_binary_i(IR_OP_MINIMUM, -3, 2, i32), -3);
    cr_assert_eq(ir_binary_i(IR_OP_GE, -1, 0, i64), 0);
    cr_assert_eq(ir_binary_i(IR_OP_NE, 4, 4, i64), 0);
    cr_assert_eq(ir_binary_i(IR_OP_LOGICAL_AND, 2, -1, i32), 1);
    cr_assert_eq(ir_binary_i(IR_OP_LOGICAL_XOR, 2, -1, i32), 0);
    cr_assert_eq(ir_binary_i(IR_OP_LOGICAL_OR, 0, 0, bl), 0);
    cr_assert_eq(ir_binary_i(IR_OP_EQ, 1, 1, bl), 1);
}

/* ---- float ops --------------------------------------------------------------------------- */

static bool same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || bits64(a) == bits64(b);
}

Test(float_ops, remainder_matches_numpy)
{
    FILE *f = open_data("dtype_remainder_f64.txt");
    char line[256];
    int n = 0;
    while (next_line(f, line, sizeof line)) {
        uint64_t ab, bb, rb;
        cr_assert_eq(sscanf(line, "%" SCNx64 " %" SCNx64 " %" SCNx64, &ab, &bb, &rb), 3,
                     "bad line %s", line);
        double a = from_bits64(ab), b = from_bits64(bb), want = from_bits64(rb);
        double got = ir_binary_f(IR_OP_REMAINDER, a, b);
        cr_assert(same_double(got, want), "remainder(%a, %a) = %a, want %a", a, b, got, want);
        n++;
    }
    fclose(f);
    cr_assert_gt(n, 500, "only %d vectors", n);
}

/* gelu x = x/2 erfc(-x/sqrt 2) is accurate in the far negative tail, where 1 + erf(x/sqrt 2)
 * would cancel to nothing (gelu(-10) = -7.6e-23, not 0); values from 40-digit arithmetic. glibc's
 * erfc and the composition's roundings allow a few ulps. */
Test(float_ops, gelu_tail_and_edges)
{
    static const double x[] = {-1.0, -3.0, -5.5, -10.0, -20.0, -30.0, 2.5};
    static const double want[] = {-0x1.44ed0bb7cb20bp-3,  -0x1.096697b244861p-8,  -0x1.c093d8972fbbep-24,
                                  -0x1.7079362639d51p-74, -0x1.1876296f504b2p-290, -0x1.601c52358b95dp-651,
                                  0x1.3e034de12223cp+1};
    for (size_t i = 0; i < COUNT(x); i++) {
        double got = ir_unary_f(IR_OP_GELU, x[i], NULL);
        cr_assert_leq(fabs(got - want[i]), 4 * ulp64(want[i]), "gelu(%g) = %a, want %a", x[i], got, want[i]);
    }
    cr_assert_eq(bits64(ir_unary_f(IR_OP_GELU, -0.0, NULL)), bits64(-0.0));
    cr_assert_eq(bits64(ir_unary_f(IR_OP_GELU, -40.0, NULL)), bits64(-0.0)); /* underflows, keeps the sign */
    cr_assert_eq(ir_unary_f(IR_OP_GELU, 40.0, NULL), 40.0);
    cr_assert_eq(ir_unary_f(IR_OP_GELU, DBL_MAX, NULL), DBL_MAX);
    cr_assert_eq(bits64(ir_unary_f(IR_OP_GELU, -DBL_MAX, NULL)), bits64(-0.0));
    cr_assert_eq(ir_unary_f(IR_OP_GELU, INFINITY, NULL), INFINITY);
    cr_assert(isnan(ir_unary_f(IR_OP_GELU, -INFINITY, NULL))); /* -inf * erfc(inf) = -inf * 0 */
    cr_assert(isnan(ir_unary_f(IR_OP_GELU, NAN, NULL)));
    /* an f32 result is the double result rounded: the true value, representable in f32 */
    cr_assert_eq((float)ir_unary_f(IR_OP_GELU, -10.0, NULL), (float)-0x1.7079362639d51p-74);
}

Test(float_ops, numpy_edge_semantics)
{
    /* numpy: sign(-0.0) is +0.0; NaN stays NaN. */
    cr_assert_eq(bits64(ir_unary_f(IR_OP_SIGN, -0.0, NULL)), bits64(0.0));
    cr_assert(isnan(ir_unary_f(IR_OP_SIGN, NAN, NULL)));
    cr_assert_eq(ir_unary_f(IR_OP_SIGN, -1e-300, NULL), -1.0);
    /* numpy: maximum/minimum propagate NaN; of two equal zeros they return the second. */
    cr_assert_eq(bits64(ir_binary_f(IR_OP_MAXIMUM, -0.0, 0.0)), bits64(0.0));
    cr_assert_eq(bits64(ir_binary_f(IR_OP_MAXIMUM, 0.0, -0.0)), bits64(-0.0));
    cr_assert_eq(bits64(ir_binary_f(IR_OP_MINIMUM, -0.0, 0.0)), bits64(0.0));
    cr_assert_eq(bits64(ir_binary_f(IR_OP_MINIMUM, 0.0, -0.0)), bits64(-0.0));
    cr_assert(isnan(ir_binary_f(IR_OP_MAXIMUM, NAN, 1.0)));
    cr_assert(isnan(ir_binary_f(IR_OP_MAXIMUM, 1.0, NAN)));
    cr_assert(isnan(ir_binary_f(IR_OP_MINIMUM, NAN, 1.0)));
    cr_assert(isnan(ir_binary_f(IR_OP_MINIMUM, 1.0, NAN)));
    /* numpy.clip: NaN stays NaN, lo > hi gives hi. */
    const double lohi[2] = {-1.0, 2.0}, inverted[2] = {4.0, 2.0};
    cr_assert(isnan(ir_unary_f(IR_OP_CLAMP, NAN, lohi)));
    cr_assert_eq(ir_unary_f(IR_OP_CLAMP, 5.0, lohi), 2.0);
    cr_assert_eq(ir_unary_f(IR_OP_CLAMP, -5.0, lohi), -1.0);
    cr_assert_eq(ir_unary_f(IR_OP_CLAMP, 1.0, inverted), 2.0);
    cr_assert_eq(ir_unary_f(IR_OP_CLAMP, 5.0, inverted), 2.0);
    /* round: half to even, keeping the sign of zero. */
    static const double rin[] = {0.5, 1.5, 2.5, -0.5, -2.5, -0.3, 2.6, 0x1p52 + 1, -INFINITY};
    static const double rout[] = {0.0, 2.0, 2.0, -0.0, -2.0, -0.0, 3.0, 0x1p52 + 1, -INFINITY};
    for (size_t i = 0; i < COUNT(rin); i++)
        cr_assert_eq(bits64(ir_unary_f(IR_OP_ROUND, rin[i], NULL)), bits64(rout[i]), "round(%a)",
                     rin[i]);
    cr_assert(isnan(ir_unary_f(IR_OP_ROUND, NAN, NULL)));
    /* sigmoid stays finite and exact at the ends. */
    cr_assert_eq(ir_unary_f(IR_OP_SIGMOID, -1000.0, NULL), 0.0);
    cr_assert_eq(ir_unary_f(IR_OP_SIGMOID, 1000.0, NULL), 1.0);
    cr_assert_eq(ir_unary_f(IR_OP_SIGMOID, 0.0, NULL), 0.5);
    cr_assert_gt(ir_unary_f(IR_OP_SIGMOID, -700.0, NULL), 0.0);
    cr_assert_eq(ir_unary_f(IR_OP_SILU, -1000.0, NULL), -0.0);
    cr_assert_eq(ir_unary_f(IR_OP_GELU, 0.0, NULL), 0.0);
    cr_assert_eq(ir_unary_f(IR_OP_RSQRT, 4.0, NULL), 0.5);
    cr_assert_eq(ir_unary_f(IR_OP_RELU, -3.0, NULL), 0.0);
    cr_assert_eq(ir_unary_f(IR_OP_LOGICAL_NOT, NAN, NULL), 0.0);
    cr_assert_eq(ir_unary_f(IR_OP_LOGICAL_NOT, -0.0, NULL), 1.0);
    cr_assert_eq(ir_unary_f(IR_OP_CAST, -7.25, NULL), -7.25);
    /* IEEE comparisons: NaN is unequal to everything, itself included. */
    cr_assert_eq(ir_binary_f(IR_OP_EQ, NAN, NAN), 0.0);
    cr_assert_eq(ir_binary_f(IR_OP_NE, NAN, NAN), 1.0);
    cr_assert_eq(ir_binary_f(IR_OP_LE, NAN, 1.0), 0.0);
    cr_assert_eq(ir_binary_f(IR_OP_GE, 1.0, NAN), 0.0);
    cr_assert_eq(ir_binary_f(IR_OP_EQ, -0.0, 0.0), 1.0);
    cr_assert_eq(ir_binary_f(IR_OP_LOGICAL_AND, NAN, 2.0), 1.0);
    cr_assert_eq(ir_binary_f(IR_OP_LOGICAL_XOR, 0.5, -0.0), 1.0);
    cr_assert_eq(ir_binary_f(IR_OP_LOGICAL_OR, 0.0, -0.0), 0.0);
    cr_assert_eq(ir_binary_f(IR_OP_POW, 2.0, -2.0), 0.25);
    cr_assert_eq(ir_binary_f(IR_OP_DIV, 1.0, -0.0), -INFINITY);
}

/* ---- Philox ------------------------------------------------------------------------------ */

Test(philox, random123_known_answers)
{
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < COUNT(kat); i++) {
        uint32_t out[4];
        ir_philox4x32_block(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            cr_assert_eq(out[j], kat[i].want[j], "vector %zu word %d: %08x", i, j, out[j]);
    }
    /* The 64-bit form is the block of {lo, hi, 0, 0} and {lo, hi}. */
    const uint64_t counter = UINT64_C(0x85a308d3243f6a88), key = UINT64_C(0x299f31d0a4093822);
    const uint32_t c[4] = {0x243f6a88, 0x85a308d3, 0, 0}, k[2] = {0xa4093822, 0x299f31d0};
    uint32_t a[4], b[4];
    ir_philox4x32(counter, key, a);
    ir_philox4x32_block(c, k, b);
    cr_assert_arr_eq(a, b, sizeof a);
    ir_philox4x32(0, 0, a);
    cr_assert_eq(a[0], 0x6627e8d5);
}

/* The uniform recipe of ir.h, recomputed from the block. */
static double uniform_by_recipe(uint64_t key, uint64_t counter, burnc_dtype_t dt)
{
    uint32_t w[4];
    ir_philox4x32(counter, key, w);
    switch (dt) {
    case BURNC_DTYPE_F64: return (double)((((uint64_t)w[1] << 32) | w[0]) >> 11) * 0x1p-53;
    case BURNC_DTYPE_F16: return (double)(w[0] >> 21) * 0x1p-11;
    case BURNC_DTYPE_BF16: return (double)(w[0] >> 24) * 0x1p-8;
    default: return (double)(w[0] >> 8) * 0x1p-24;
    }
}

static int uniform_bits(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F64: return 53;
    case BURNC_DTYPE_F16: return 11;
    case BURNC_DTYPE_BF16: return 8;
    default: return 24;
    }
}

Test(philox, uniform_in_unit_interval_and_exact)
{
    const uint64_t key = 0x0123456789abcdefu, offset = UINT64_MAX - 100; /* offset + i wraps */
    for (size_t d = 0; d < COUNT(FLOAT_DTYPES); d++) {
        burnc_dtype_t dt = FLOAT_DTYPES[d];
        for (uint64_t i = 0; i < 5000; i++) {
            double u = ir_rand_uniform(key, offset, i, dt);
            cr_assert(u >= 0.0 && u < 1.0, "%s draw %" PRIu64 " = %a", ir_dtype_name(dt), i, u);
            cr_assert_eq(u, uniform_by_recipe(key, offset + i, dt), "%s draw %" PRIu64,
                         ir_dtype_name(dt), i);
            double scaled = ldexp(u, uniform_bits(dt));
            cr_assert_eq(scaled, floor(scaled), "%s draw has bits below 2^-%d", ir_dtype_name(dt),
                         uniform_bits(dt));
            cr_assert_eq(ir_scalar_to_dtype(u, dt), u, "%s draw not exact in the dtype",
                         ir_dtype_name(dt));
        }
    }
}

/* Counters whose draws have every used bit set (found by search, key 42): the largest value
 * each dtype can draw must be 1 - 2^-bits, not 1. */
Test(philox, uniform_all_ones_draws_stay_below_one)
{
    const uint64_t key = 42;
    static const struct {
        burnc_dtype_t dt;
        uint64_t counter;
        uint32_t w0;
    } hits[] = {
        {BURNC_DTYPE_BF16, 652, 0xffc1abaf},
        {BURNC_DTYPE_F16, 3567, 0xfff09a9a},
        {BURNC_DTYPE_F32, UINT64_C(4298223710), 0xfffffff0},
    };
    for (size_t i = 0; i < COUNT(hits); i++) {
        uint32_t w[4];
        ir_philox4x32(hits[i].counter, key, w);
        cr_assert_eq(w[0], hits[i].w0);
        double u = ir_rand_uniform(key, hits[i].counter - 7, 7, hits[i].dt);
        double want = 1.0 - ldexp(1.0, -uniform_bits(hits[i].dt));
        cr_assert_eq(u, want, "%s: %a", ir_dtype_name(hits[i].dt), u);
        cr_assert_eq(ir_scalar_to_dtype(u, hits[i].dt), want);
    }
    /* f64: all 53 bits set is out of reach of a search; this draw has the high word all ones
     * (u >= 1 - 2^-32) and must stay exact and below 1. */
    uint32_t w[4];
    ir_philox4x32(UINT64_C(3105935812), key, w);
    cr_assert_eq(w[1], 0xffffffff);
    cr_assert_eq(w[0], 0xa3efa2e0);
    double u = ir_rand_uniform(key, 0, UINT64_C(3105935812), BURNC_DTYPE_F64);
    cr_assert_eq(u, (double)(UINT64_C(0xffffffffa3efa2e0) >> 11) * 0x1p-53);
    cr_assert(u >= 1.0 - 0x1p-32 && u < 1.0);
    /* The uniform that gives u1 = 1 in Box-Muller: log(1) = 0, so the normal draw is 0. */
    cr_assert_eq(ir_rand_normal(key, 0, UINT64_C(4298223710), BURNC_DTYPE_F32), 0.0);
}

static double normal_by_recipe(uint64_t key, uint64_t counter, burnc_dtype_t dt)
{
    uint32_t w[4];
    ir_philox4x32(counter, key, w);
    double u1, u2;
    if (dt == BURNC_DTYPE_F64) {
        u1 = (double)(((((uint64_t)w[1] << 32) | w[0]) >> 11) + 1) * 0x1p-53;
        u2 = (double)((((uint64_t)w[3] << 32) | w[2]) >> 11) * 0x1p-53;
    } else {
        u1 = (double)((w[0] >> 8) + 1) * 0x1p-24;
        u2 = (double)(w[2] >> 8) * 0x1p-24;
    }
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

Test(philox, normal_recipe_and_moments)
{
    const uint64_t key = 7, offset = 1000;
    const int n = 20000;
    for (size_t d = 0; d < COUNT(FLOAT_DTYPES); d++) {
        burnc_dtype_t dt = FLOAT_DTYPES[d];
        double sum = 0, sum2 = 0;
        for (int i = 0; i < n; i++) {
            double z = ir_rand_normal(key, offset, (uint64_t)i, dt);
            cr_assert(isfinite(z));
            cr_assert_eq(z, normal_by_recipe(key, offset + (uint64_t)i, dt), "%s draw %d",
                         ir_dtype_name(dt), i);
            sum += z;
            sum2 += z * z;
        }
        /* Deterministic draws, so these bounds (about 4 standard errors) never flake. */
        double mean = sum / n, var = sum2 / n - mean * mean;
        cr_assert_lt(fabs(mean), 0.03, "%s mean %g", ir_dtype_name(dt), mean);
        cr_assert_lt(fabs(var - 1.0), 0.05, "%s variance %g", ir_dtype_name(dt), var);
    }
}
