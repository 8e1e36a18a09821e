/* Dtypes: sizes, names, promotion, the f16/bf16 encodings, and element loads and stores with
 * the conversion rules of the public header. Type punning goes through memcpy only. */
#include <math.h>
#include <string.h>

#include "ir.h"

/* ---- Table ------------------------------------------------------------------------------- */

/* rank orders the promotion lattice; f16 and bf16 share a rank because neither holds the
 * other, and their join is f32 (see ir_promote). */
static const struct {
    const char *name;
    size_t size;
    int rank;
} dtype_table[] = {
    [BURNC_DTYPE_BOOL] = {"bool", 1, 0}, [BURNC_DTYPE_U8] = {"u8", 1, 1},
    [BURNC_DTYPE_I32] = {"i32", 4, 2},   [BURNC_DTYPE_I64] = {"i64", 8, 3},
    [BURNC_DTYPE_F16] = {"f16", 2, 4},   [BURNC_DTYPE_BF16] = {"bf16", 2, 4},
    [BURNC_DTYPE_F32] = {"f32", 4, 5},   [BURNC_DTYPE_F64] = {"f64", 8, 6},
};

bool ir_dtype_valid(burnc_dtype_t dt)
{
    return dt >= BURNC_DTYPE_F32 && dt <= BURNC_DTYPE_BOOL;
}

size_t ir_dtype_size(burnc_dtype_t dt)
{
    return ir_dtype_valid(dt) ? dtype_table[dt].size : 0;
}

const char *ir_dtype_name(burnc_dtype_t dt)
{
    return ir_dtype_valid(dt) ? dtype_table[dt].name : "invalid";
}

bool ir_dtype_is_float(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 ||
           dt == BURNC_DTYPE_BF16;
}

bool ir_dtype_is_int(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_I32 || dt == BURNC_DTYPE_I64 || dt == BURNC_DTYPE_U8;
}

/* An invalid operand has no promotion: the answer is BURNC_DTYPE_DEFAULT, which no storage
 * dtype equals, so a caller that forgot to validate fails visibly. */
burnc_dtype_t ir_promote(burnc_dtype_t a, burnc_dtype_t b)
{
    if (!ir_dtype_valid(a) || !ir_dtype_valid(b))
        return BURNC_DTYPE_DEFAULT;
    if (a == b)
        return a;
    if (dtype_table[a].rank == dtype_table[b].rank)
        return BURNC_DTYPE_F32; /* f16 with bf16 */
    return dtype_table[a].rank > dtype_table[b].rank ? a : b;
}

size_t burnc_dtype_size(burnc_dtype_t dtype) { return ir_dtype_size(dtype); }
const char *burnc_dtype_name(burnc_dtype_t dtype) { return ir_dtype_name(dtype); }

/* ---- Narrow floats ----------------------------------------------------------------------- */

/* A binary interchange format of at most 16 bits: `mant` stored fraction bits and `bias`. */
typedef struct narrow_fmt {
    int mant;
    int exp_bits;
    int bias;
} narrow_fmt;

static const narrow_fmt FMT_F16 = {10, 5, 15};
static const narrow_fmt FMT_BF16 = {7, 8, 127};

static uint64_t f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double f64_from_bits(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint16_t narrow_inf(narrow_fmt f, bool neg)
{
    uint16_t sign = (uint16_t)(neg ? 1u << (f.mant + f.exp_bits) : 0);
    return (uint16_t)(sign | (((1u << f.exp_bits) - 1) << f.mant));
}

/* Rounds the exact value sig * 2^e2 (sig > 0) to the format, to nearest, ties to even. Both
 * the double and the int64 paths end here, so each rounds once, straight from the exact
 * value. */
static uint16_t narrow_round(narrow_fmt f, bool neg, uint64_t sig, int e2)
{
    uint16_t sign = (uint16_t)(neg ? 1u << (f.mant + f.exp_bits) : 0);
    int msb = 63 - __builtin_clzll(sig);
    int e = msb + e2;                    /* value in [2^e, 2^(e+1)) */
    int emin = 1 - f.bias;               /* below it the spacing stops shrinking: subnormals */
    int eq = (e > emin ? e : emin);      /* exponent that fixes the spacing of the result */
    int shift = (eq - f.mant) - e2;      /* result spacing is 2^(eq - mant) */
    uint64_t n;
    if (shift <= 0) {
        n = sig << -shift; /* exact: only small integers get here, n < 2^(mant+1) */
    } else if (shift >= 64) {
        n = 0; /* sig < 2^53 on this path, far below half the spacing */
    } else {
        uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
        uint64_t half = UINT64_C(1) << (shift - 1);
        n = sig >> shift;
        if (rem > half || (rem == half && (n & 1)))
            n++;
    }
    /* n carries the implicit bit, so adding it to the exponent field one below eq encodes
     * normals, subnormals (eq == emin, field 0) and a rounding carry into the next binade
     * alike. */
    uint64_t bits = ((uint64_t)(eq + f.bias - 1) << f.mant) + n;
    if (bits >= (uint64_t)narrow_inf(f, false))
        return narrow_inf(f, neg);
    return (uint16_t)(sign | bits);
}

static uint16_t narrow_from_f64(narrow_fmt f, double x)
{
    uint64_t u = f64_bits(x);
    bool neg = (u >> 63) != 0;
    uint64_t frac = u & ((UINT64_C(1) << 52) - 1);
    int ef = (int)((u >> 52) & 0x7ff);
    uint16_t sign = (uint16_t)(neg ? 1u << (f.mant + f.exp_bits) : 0);
    if (ef == 0x7ff) {
        if (frac == 0)
            return narrow_inf(f, neg);
        /* Quiet NaN; the payload's top bits survive as they do in hardware conversions. */
        uint64_t payload = frac >> (52 - f.mant);
        return (uint16_t)(narrow_inf(f, neg) | payload | (1u << (f.mant - 1)));
    }
    if (ef == 0)
        return sign; /* zero, or a double subnormal: far below any narrow subnormal */
    return narrow_round(f, neg, frac | (UINT64_C(1) << 52), ef - 1075);
}

static double narrow_to_f64(narrow_fmt f, uint16_t h)
{
    bool neg = ((h >> (f.mant + f.exp_bits)) & 1) != 0;
    uint64_t frac = h & ((1u << f.mant) - 1);
    int ef = (h >> f.mant) & ((1 << f.exp_bits) - 1);
    uint64_t sign = neg ? UINT64_C(1) << 63 : 0;
    if (ef == (1 << f.exp_bits) - 1) /* inf or NaN: keep the payload bit for bit */
        return f64_from_bits(sign | (UINT64_C(0x7ff) << 52) | (frac << (52 - f.mant)));
    if (ef == 0) {
        double v = ldexp((double)frac, 1 - f.bias - f.mant); /* exact */
        return neg ? -v : v;
    }
    uint64_t e = (uint64_t)(ef - f.bias + 1023);
    return f64_from_bits(sign | (e << 52) | (frac << (52 - f.mant)));
}

/* int64 -> narrow float, rounded once from the exact integer (going through double would
 * round twice for |v| > 2^53). */
static uint16_t narrow_from_i64(narrow_fmt f, int64_t v)
{
    if (v == 0)
        return 0;
    uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    return narrow_round(f, v < 0, mag, 0);
}

uint16_t ir_f64_to_f16(double x) { return narrow_from_f64(FMT_F16, x); }
uint16_t ir_f64_to_bf16(double x) { return narrow_from_f64(FMT_BF16, x); }
double ir_f16_to_f64(uint16_t h) { return narrow_to_f64(FMT_F16, h); }
double ir_bf16_to_f64(uint16_t h) { return narrow_to_f64(FMT_BF16, h); }

/* float -> double is exact, so these round once too. */
uint16_t burnc_f32_to_f16(float x) { return ir_f64_to_f16(x); }
float burnc_f16_to_f32(uint16_t h) { return (float)ir_f16_to_f64(h); }
uint16_t burnc_f32_to_bf16(float x) { return ir_f64_to_bf16(x); }
float burnc_bf16_to_f32(uint16_t h) { return (float)ir_bf16_to_f64(h); }

/* ---- Float to integer -------------------------------------------------------------------- */

/* hi is 2^k - 1, so hi + 1.0 is exactly 2^k even where hi itself is not a double (i64). */
int64_t ir_trunc_sat(double v, int64_t lo, int64_t hi)
{
    if (isnan(v))
        return 0;
    double t = trunc(v);
    if (t >= (double)hi + 1.0)
        return hi;
    if (t <= (double)lo)
        return lo;
    return (int64_t)t;
}

uint64_t ir_trunc_sat_u64(double v)
{
    if (isnan(v) || v <= 0)
        return 0;
    double t = trunc(v);
    return t >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)t;
}

/* ---- Loads and stores -------------------------------------------------------------------- */

static uint16_t load_u16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

double ir_load_f(const void *p, burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F32: {
        float f;
        memcpy(&f, p, sizeof f);
        return f;
    }
    case BURNC_DTYPE_F64: {
        double d;
        memcpy(&d, p, sizeof d);
        return d;
    }
    case BURNC_DTYPE_F16: return ir_f16_to_f64(load_u16(p));
    case BURNC_DTYPE_BF16: return ir_bf16_to_f64(load_u16(p));
    case BURNC_DTYPE_I32:
    case BURNC_DTYPE_I64:
    case BURNC_DTYPE_U8:
    case BURNC_DTYPE_BOOL: return (double)ir_load_i(p, dt);
    default: return 0;
    }
}

int64_t ir_load_i(const void *p, burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_I32: {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case BURNC_DTYPE_I64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case BURNC_DTYPE_U8: return *(const uint8_t *)p;
    case BURNC_DTYPE_BOOL: return *(const uint8_t *)p != 0;
    case BURNC_DTYPE_F32:
    case BURNC_DTYPE_F64:
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return ir_trunc_sat(ir_load_f(p, dt), INT64_MIN, INT64_MAX);
    default: return 0;
    }
}

static void store_u16(void *p, uint16_t h) { memcpy(p, &h, sizeof h); }

/* Integer dtypes keep the low bits: two's complement wrap, u8 modulo 256. */
static void store_wrapped(void *p, burnc_dtype_t dt, int64_t v)
{
    if (dt == BURNC_DTYPE_I32) {
        uint32_t u = (uint32_t)(uint64_t)v;
        memcpy(p, &u, sizeof u);
    } else if (dt == BURNC_DTYPE_I64) {
        memcpy(p, &v, sizeof v);
    } else {
        *(uint8_t *)p = (uint8_t)(uint64_t)v;
    }
}

void ir_store_f(void *p, burnc_dtype_t dt, double v)
{
    switch (dt) {
    case BURNC_DTYPE_F32: {
        float f = (float)v;
        memcpy(p, &f, sizeof f);
        break;
    }
    case BURNC_DTYPE_F64: memcpy(p, &v, sizeof v); break;
    case BURNC_DTYPE_F16: store_u16(p, ir_f64_to_f16(v)); break;
    case BURNC_DTYPE_BF16: store_u16(p, ir_f64_to_bf16(v)); break;
    case BURNC_DTYPE_I32: store_wrapped(p, dt, ir_trunc_sat(v, INT32_MIN, INT32_MAX)); break;
    case BURNC_DTYPE_I64: store_wrapped(p, dt, ir_trunc_sat(v, INT64_MIN, INT64_MAX)); break;
    case BURNC_DTYPE_U8: store_wrapped(p, dt, ir_trunc_sat(v, 0, UINT8_MAX)); break;
    case BURNC_DTYPE_BOOL: *(uint8_t *)p = v != 0; break; /* NaN != 0: true */
    default: break;
    }
}

void ir_store_i(void *p, burnc_dtype_t dt, int64_t v)
{
    switch (dt) {
    case BURNC_DTYPE_F32: {
        float f = (float)v; /* one rounding, straight from the integer */
        memcpy(p, &f, sizeof f);
        break;
    }
    case BURNC_DTYPE_F64: {
        double d = (double)v;
        memcpy(p, &d, sizeof d);
        break;
    }
    case BURNC_DTYPE_F16: store_u16(p, narrow_from_i64(FMT_F16, v)); break;
    case BURNC_DTYPE_BF16: store_u16(p, narrow_from_i64(FMT_BF16, v)); break;
    case BURNC_DTYPE_I32:
    case BURNC_DTYPE_I64:
    case BURNC_DTYPE_U8: store_wrapped(p, dt, v); break;
    case BURNC_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
    }
}

double ir_scalar_to_dtype(double v, burnc_dtype_t dt)
{
    if (!ir_dtype_valid(dt))
        return v;
    unsigned char buf[8];
    ir_store_f(buf, dt, v);
    return ir_load_f(buf, dt);
}
