/* The meaning of every element-wise op, per element: the reference device calls these, and
 * every other backend must agree with them. Floats compute in double (the caller rounds once
 * to the output dtype); integers and bool compute in int64 with wrapping arithmetic done in
 * uint64, so nothing here is undefined behaviour (the caller wraps to the output dtype). */
#include <math.h>

#include "ir.h"

/* ---- Float path -------------------------------------------------------------------------- */

/* Split at 0 so that exp never overflows: for x << 0 the first form would give 1/inf. */
static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* Half to even without relying on the thread's rounding mode (nearbyint would). x - floor(x)
 * is exact for every double, and large doubles are already integers (frac 0). */
static double round_half_even(double x)
{
    double r = floor(x);
    double frac = x - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return copysign(r, x); /* -0.3 and -0.5 round to -0, as in numpy */
}

/* numpy's sign: sign(-0.0) is +0.0, NaN stays NaN. */
static double sign_f(double x)
{
    if (x > 0)
        return 1.0;
    if (x < 0)
        return -1.0;
    return x == 0 ? 0.0 : x;
}

/* numpy's maximum and minimum: NaN in either operand wins; between equal operands (-0.0 and
 * 0.0) the second one is returned, which is what numpy does. */
static double maximum_f(double a, double b) { return (a > b || isnan(a)) ? a : b; }
static double minimum_f(double a, double b) { return (a < b || isnan(a)) ? a : b; }

/* numpy's remainder: fmod, moved by one divisor when its sign differs from the divisor's; a
 * zero result takes the divisor's sign. Divisor 0 or dividend inf give NaN (from fmod); a
 * finite dividend and an infinite divisor of the other sign give that infinity. */
static double remainder_f(double a, double b)
{
    double m = fmod(a, b);
    if (b == 0 || isnan(m))
        return m;
    if (m == 0)
        return copysign(0.0, b);
    if ((m < 0) != (b < 0))
        m += b;
    return m;
}

/* gelu x = (0.5 x) erfc(-x / sqrt 2), with the argument carried as th + tl and erfc(th + tl) =
 * erfc(th) - tl (2/sqrt pi) e^(-th^2): erfc's relative condition number 2 t^2 would otherwise
 * turn the rounding of t into up to 11 bits of error (ir/kernel_ops.c does the same steps in
 * the compute type). 1/sqrt 2 = SQRT1_2 + SQRT1_2_LO. */
static double gelu(double x)
{
    static const double SQRT1_2 = 0x1.6a09e667f3bcdp-1, SQRT1_2_LO = -0x1.bdd3413b26456p-55;
    static const double TWO_OVER_SQRTPI = 0x1.20dd750429b6dp+0;
    double th = -x * SQRT1_2;
    double tl = isinf(th) ? 0.0 : fma(-x, SQRT1_2_LO, fma(-x, SQRT1_2, -th));
    double s = fma(-(tl * TWO_OVER_SQRTPI), exp(-(th * th)), erfc(th));
    return 0.5 * x * s;
}

/* gelu'(x) = Phi(x) + x phi(x): Phi(x) = erfc(th + tl) / 2 as in gelu, phi(x) = e^(-p)
 * (1 - pl - 2 th tl) / sqrt(2 pi) (x^2/2 = (th + tl)^2, th^2 = p + pl); its limits 1 and -0
 * from |x| = 40 on. */
static double gelu_grad(double x)
{
    static const double SQRT1_2 = 0x1.6a09e667f3bcdp-1, SQRT1_2_LO = -0x1.bdd3413b26456p-55;
    static const double TWO_OVER_SQRTPI = 0x1.20dd750429b6dp+0, INV_SQRT_2PI = 0x1.9884533d43651p-2;
    if (fabs(x) >= 40.0)
        return x > 0 ? 1.0 : -0.0;
    double th = -x * SQRT1_2;
    double tl = fma(-x, SQRT1_2_LO, fma(-x, SQRT1_2, -th));
    double p = th * th, pl = fma(th, th, -p);
    double d = exp(-p);
    double s = fma(-(tl * TWO_OVER_SQRTPI), d, erfc(th));
    double xc = x * INV_SQRT_2PI * fma(-2.0 * th, tl, 1.0 - pl);
    return fma(xc, d, 0.5 * s);
}

double ir_unary_f(ir_op op, double x, const double *scalar)
{
    switch (op) {
    case IR_OP_NEG: return -x;
    case IR_OP_ABS: return fabs(x);
    case IR_OP_SIGN: return sign_f(x);
    case IR_OP_EXP: return exp(x);
    case IR_OP_EXP2: return exp2(x);
    case IR_OP_EXPM1: return expm1(x);
    case IR_OP_LOG: return log(x);
    case IR_OP_LOG2: return log2(x);
    case IR_OP_LOG1P: return log1p(x);
    case IR_OP_SQRT: return sqrt(x);
    case IR_OP_RSQRT: return 1.0 / sqrt(x);
    case IR_OP_RECIPROCAL: return 1.0 / x;
    case IR_OP_SIN: return sin(x);
    case IR_OP_COS: return cos(x);
    case IR_OP_TAN: return tan(x);
    case IR_OP_TANH: return tanh(x);
    case IR_OP_SIGMOID: return sigmoid(x);
    case IR_OP_RELU: return maximum_f(x, 0.0);
    case IR_OP_GELU: return gelu(x);
    case IR_OP_GELU_GRAD: return gelu_grad(x);
    case IR_OP_SILU: return x * sigmoid(x);
    case IR_OP_ERF: return erf(x);
    case IR_OP_FLOOR: return floor(x);
    case IR_OP_CEIL: return ceil(x);
    case IR_OP_ROUND: return round_half_even(x);
    case IR_OP_LOGICAL_NOT: return x == 0;
    case IR_OP_CAST: return x;
    case IR_OP_CLAMP: return minimum_f(maximum_f(x, scalar[0]), scalar[1]);
    default: return 0;
    }
}

double ir_binary_f(ir_op op, double a, double b)
{
    switch (op) {
    case IR_OP_ADD: return a + b;
    case IR_OP_SUB: return a - b;
    case IR_OP_MUL: return a * b;
    case IR_OP_DIV: return a / b;
    case IR_OP_POW: return pow(a, b);
    case IR_OP_MAXIMUM: return maximum_f(a, b);
    case IR_OP_MINIMUM: return minimum_f(a, b);
    case IR_OP_REMAINDER: return remainder_f(a, b);
    case IR_OP_ATAN2: return atan2(a, b);
    case IR_OP_EQ: return a == b;
    case IR_OP_NE: return a != b;
    case IR_OP_LT: return a < b;
    case IR_OP_LE: return a <= b;
    case IR_OP_GT: return a > b;
    case IR_OP_GE: return a >= b;
    case IR_OP_LOGICAL_AND: return a != 0 && b != 0;
    case IR_OP_LOGICAL_OR: return a != 0 || b != 0;
    case IR_OP_LOGICAL_XOR: return (a != 0) != (b != 0);
    default: return 0;
    }
}

/* ---- Integer path ------------------------------------------------------------------------ */

/* The value an element of dt holds, whatever bits the caller left above the dtype's width:
 * results then depend only on the stored value (u8 0..255, i32 sign-extended, bool 0/1). */
static int64_t canonical(int64_t v, burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_I32: {
        uint32_t u = (uint32_t)(uint64_t)v;
        return u <= INT32_MAX ? (int64_t)u : (int64_t)u - ((int64_t)1 << 32);
    }
    case BURNC_DTYPE_U8: return (uint8_t)(uint64_t)v;
    case BURNC_DTYPE_BOOL: return v != 0;
    default: return v;
    }
}

/* uint64 -> int64 by two's complement, without the implementation-defined conversion. */
static int64_t from_u64(uint64_t u)
{
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static int64_t wrap_add(int64_t a, int64_t b) { return from_u64((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return from_u64((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return from_u64((uint64_t)a * (uint64_t)b); }
static int64_t wrap_neg(int64_t a) { return from_u64(0 - (uint64_t)a); }

/* Python's //: the quotient rounded toward -inf. C's / truncates, so step down when the
 * division was inexact and the signs differ. INT64_MIN / -1 wraps to INT64_MIN. */
int64_t ir_floor_div(int64_t a, int64_t b)
{
    if (b == 0)
        return 0;
    if (b == -1)
        return wrap_neg(a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* Python's %: the result has the divisor's sign, so a == ir_floor_div(a, b) * b + mod. */
int64_t ir_floor_mod(int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* Square and multiply in uint64: wrapping is the product's low bits, whatever the width. */
static int64_t int_pow(int64_t base, int64_t e)
{
    if (e < 0) {
        if (base == 1)
            return 1;
        if (base == -1)
            return (e & 1) ? -1 : 1;
        return 0;
    }
    uint64_t result = 1, b = (uint64_t)base;
    for (uint64_t n = (uint64_t)e; n != 0; n >>= 1) {
        if (n & 1)
            result *= b;
        b *= b;
    }
    return from_u64(result);
}

/* Clamp bounds reach us as doubles already converted to dt; ir_load_i of a double applies the
 * cast rules, so a bound of 2^63 (i64's saturated maximum in double) becomes INT64_MAX
 * instead of an undefined conversion. */
static int64_t bound_i(double v)
{
    return ir_load_i(&v, BURNC_DTYPE_F64);
}

static int64_t max_i(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min_i(int64_t a, int64_t b) { return a < b ? a : b; }

int64_t ir_unary_i(ir_op op, int64_t x, burnc_dtype_t dt, const double *scalar)
{
    x = canonical(x, dt);
    switch (op) {
    case IR_OP_NEG: return wrap_neg(x);
    case IR_OP_ABS: return x < 0 ? wrap_neg(x) : x;
    case IR_OP_SIGN: return (x > 0) - (x < 0);
    case IR_OP_RELU: return max_i(x, 0);
    case IR_OP_FLOOR:
    case IR_OP_CEIL:
    case IR_OP_ROUND:
    case IR_OP_CAST: return x;
    case IR_OP_LOGICAL_NOT: return x == 0;
    case IR_OP_CLAMP: return min_i(max_i(x, bound_i(scalar[0])), bound_i(scalar[1]));
    default: return 0; /* float-only ops: the recorder promotes them to a float dtype */
    }
}

int64_t ir_binary_i(ir_op op, int64_t a, int64_t b, burnc_dtype_t dt)
{
    a = canonical(a, dt);
    b = canonical(b, dt);
    switch (op) {
    case IR_OP_ADD: return wrap_add(a, b);
    case IR_OP_SUB: return wrap_sub(a, b);
    case IR_OP_MUL: return wrap_mul(a, b);
    case IR_OP_DIV: return ir_floor_div(a, b);
    case IR_OP_POW: return int_pow(a, b);
    case IR_OP_MAXIMUM: return max_i(a, b);
    case IR_OP_MINIMUM: return min_i(a, b);
    case IR_OP_REMAINDER: return ir_floor_mod(a, b);
    case IR_OP_EQ: return a == b;
    case IR_OP_NE: return a != b;
    case IR_OP_LT: return a < b;
    case IR_OP_LE: return a <= b;
    case IR_OP_GT: return a > b;
    case IR_OP_GE: return a >= b;
    case IR_OP_LOGICAL_AND: return a != 0 && b != 0;
    case IR_OP_LOGICAL_OR: return a != 0 || b != 0;
    case IR_OP_LOGICAL_XOR: return (a != 0) != (b != 0);
    default: return 0; /* atan2: float-only, promoted by the recorder */
    }
}
