/* The one place that turns each element-wise op of ops.def into kernel instructions, with the
 * semantics ir/scalar.c defines in double: fusion and eager mode both build kernels through
 * here, so every codegen computes every op the same way. Also Philox 4x32-10 and the
 * rand/randn recipes of ir/philox.c.
 *
 * Exactness against scalar.c: ops that are one IEEE operation there (add, sub, mul, div,
 * sqrt, reciprocal, floor, ceil, round, comparisons, maximum, minimum, clamp, sign, remainder)
 * are one correctly rounded operation (or exact selects) here too, so in f32 they equal the
 * double result rounded to f32 (for +, -, *, /, sqrt, double rounding through double is
 * innocuous). Ops built on the math functions of ir/math.c carry their documented errors.
 *
 * Builders never look at an operand's value; an operand of -1 (an earlier failure) makes the
 * emitted instruction fail kir_valid, so failures surface there. */
#include <math.h>

#include "kernel_ops.h"

/* ---- Small emitters ---------------------------------------------------------------------- */

static int32_t un(kir_kernel *k, kir_opcode op, kir_type t, int32_t a) { return kir_emit(k, op, t, a, -1, -1); }

static int32_t bin(kir_kernel *k, kir_opcode op, kir_type t, int32_t a, int32_t b)
{
    return kir_emit(k, op, t, a, b, -1);
}

static int32_t cmp(kir_kernel *k, kir_opcode op, int32_t a, int32_t b) { return kir_emit(k, op, KIR_BOOL, a, b, -1); }

static int32_t sel(kir_kernel *k, kir_type t, int32_t c, int32_t a, int32_t b)
{
    return kir_emit(k, KIR_SELECT, t, c, a, b);
}

/* A constant of t: floats from a double, integers from an int64 (wrapped). */
static int32_t cst(kir_kernel *k, kir_type t, double v)
{
    return kir_type_is_float(t) ? kir_const_f(k, t, v) : kir_const_i(k, t, (int64_t)v);
}

static bool is_fp(kir_type t) { return t == KIR_F32 || t == KIR_F64; }
static bool is_int(kir_type t) { return t == KIR_U8 || t == KIR_I32 || t == KIR_U32 || t == KIR_I64 || t == KIR_U64; }

/* x converted to `to` unless it already has that type (-1 stays -1). */
static int32_t as_type(kir_kernel *k, int32_t x, kir_type to)
{
    if (x < 0 || x >= k->n_insts || k->insts[x].type == to)
        return x;
    return un(k, KIR_CONVERT, to, x);
}

int32_t kir_round(kir_kernel *k, int32_t x, kir_type fmt)
{
    int32_t r = un(k, KIR_ROUND, KIR_F32, x);
    if (r >= 0)
        k->insts[r].imm.i = fmt;
    return r;
}

/* ---- Shared pieces of scalar.c ----------------------------------------------------------- */

/* numpy's maximum/minimum: (a > b || isnan(a)) ? a : b, with < for the minimum. Equal
 * operands (0.0 and -0.0) give b. Integers have no NaN. */
static int32_t extremum(kir_kernel *k, kir_type t, int32_t a, int32_t b, bool max)
{
    int32_t c = cmp(k, max ? KIR_GT : KIR_LT, a, b);
    if (is_fp(t))
        c = bin(k, KIR_OR, KIR_BOOL, c, cmp(k, KIR_NE, a, a));
    return sel(k, t, c, a, b);
}

/* numpy's sign: 1, -1, 0 for both zeros (+0), NaN unchanged. */
static int32_t sign(kir_kernel *k, kir_type t, int32_t x)
{
    int32_t zero = cst(k, t, 0), one = cst(k, t, 1), m1 = cst(k, t, -1);
    int32_t r = is_fp(t) ? sel(k, t, cmp(k, KIR_EQ, x, zero), zero, x) : zero;
    r = sel(k, t, cmp(k, KIR_LT, x, zero), m1, r);
    return sel(k, t, cmp(k, KIR_GT, x, zero), one, r);
}

/* numpy's float remainder on C's fmod: the result moves by one divisor when its sign differs
 * from the divisor's, a zero result takes the divisor's sign; a zero divisor or a NaN fmod
 * (inf dividend, NaN operand) is returned as is. */
static int32_t remainder_fp(kir_kernel *k, kir_type t, int32_t a, int32_t b)
{
    int32_t zero = cst(k, t, 0.0), nzero = cst(k, t, -0.0);
    int32_t m = bin(k, KIR_REM, t, a, b);
    int32_t b_neg = cmp(k, KIR_LT, b, zero);
    int32_t differ = bin(k, KIR_XOR, KIR_BOOL, cmp(k, KIR_LT, m, zero), b_neg);
    int32_t r = sel(k, t, differ, bin(k, KIR_ADD, t, m, b), m);
    r = sel(k, t, cmp(k, KIR_EQ, m, zero), sel(k, t, b_neg, nzero, zero), r);
    int32_t keep = bin(k, KIR_OR, KIR_BOOL, cmp(k, KIR_EQ, b, zero), cmp(k, KIR_NE, m, m));
    return sel(k, t, keep, m, r);
}

/* Integer power by squaring, unrolled over the exponent's value bits; the product wraps in
 * t, whose low bits are those of scalar.c's uint64 product. A negative exponent gives 1 for
 * base 1, +-1 for base -1 by the exponent's parity, 0 otherwise. */
static int32_t int_pow(kir_kernel *k, kir_type t, int32_t base, int32_t e)
{
    bool sg = t == KIR_I32 || t == KIR_I64;
    int bits = kir_type_bits(t) - (sg ? 1 : 0);
    int32_t zero = cst(k, t, 0), one = cst(k, t, 1);
    int32_t r = one, b = base;
    for (int i = 0; i < bits; i++) {
        int32_t mask = kir_const_i(k, t, (int64_t)(UINT64_C(1) << i));
        int32_t bit = cmp(k, KIR_NE, bin(k, KIR_AND, t, e, mask), zero);
        r = sel(k, t, bit, bin(k, KIR_MUL, t, r, b), r);
        if (i + 1 < bits)
            b = bin(k, KIR_MUL, t, b, b);
    }
    if (!sg)
        return r;
    int32_t m1 = cst(k, t, -1);
    int32_t odd = cmp(k, KIR_NE, bin(k, KIR_AND, t, e, one), zero);
    int32_t neg_r = sel(k, t, cmp(k, KIR_EQ, base, m1), sel(k, t, odd, m1, one), zero);
    neg_r = sel(k, t, cmp(k, KIR_EQ, base, one), one, neg_r);
    return sel(k, t, cmp(k, KIR_LT, e, zero), neg_r, r);
}

/* x != 0 as BOOL (NaN is true); a BOOL is itself. */
static int32_t truth(kir_kernel *k, kir_type t, int32_t x)
{
    return t == KIR_BOOL ? x : cmp(k, KIR_NE, x, cst(k, t, 0));
}

/* 2 Phi(x) = erfc(t), t = -x / sqrt 2, in f64 (gelu and gelu_grad), step for step as scalar.c's.
 * erfc's relative condition number is 2 t^2, so t rounded to the type would cost up to 11 bits
 * near f64's underflow: t is carried as th + tl (1/sqrt 2 split in two constants, the product's
 * error by fma) and erfc(th + tl) = erfc(th) - tl (2/sqrt pi) e^(-th^2), the neglected terms
 * below 2^-60 relative. tl is 0 where th is infinite (an fma of inf would give NaN there;
 * e^(-th^2) is 0 anyway). Also p = th^2 rounded and d = e^(-p). */
typedef struct cdf2 {
    int32_t th, tl, p, d, s;
} cdf2;

static cdf2 cdf2_f64(kir_kernel *k, kir_type t, int32_t x)
{
    cdf2 c;
    int32_t c_hi = cst(k, t, 0x1.6a09e667f3bcdp-1), c_lo = cst(k, t, -0x1.bdd3413b26456p-55);
    int32_t nx = un(k, KIR_NEG, t, x);
    c.th = bin(k, KIR_MUL, t, nx, c_hi);
    c.tl = kir_emit(k, KIR_FMA, t, nx, c_lo, kir_emit(k, KIR_FMA, t, nx, c_hi, un(k, KIR_NEG, t, c.th)));
    int32_t finite = cmp(k, KIR_LT, un(k, KIR_ABS, t, c.th), cst(k, t, INFINITY));
    c.tl = sel(k, t, finite, c.tl, cst(k, t, 0.0));
    c.p = bin(k, KIR_MUL, t, c.th, c.th);
    c.d = kir_exp(k, un(k, KIR_NEG, t, c.p));
    int32_t u = bin(k, KIR_MUL, t, c.tl, cst(k, t, 0x1.20dd750429b6dp+0)); /* 2/sqrt pi */
    c.s = kir_emit(k, KIR_FMA, t, un(k, KIR_NEG, t, u), c.d, kir_erfc(k, c.th));
    return c;
}

/* f32 gelu is kir_gelu (ir/math.c, division-free); f64 gelu x = (0.5 x) erfc(-x / sqrt 2). */
static int32_t gelu(kir_kernel *k, kir_type t, int32_t x)
{
    if (t == KIR_F32)
        return kir_gelu(k, x);
    return bin(k, KIR_MUL, t, bin(k, KIR_MUL, t, cst(k, t, 0.5), x), cdf2_f64(k, t, x).s);
}

/* gelu'(x) = Phi(x) + x phi(x). f32 is kir_gelu_grad (ir/math.c: one exp, no erf). f64, step
 * for step as scalar.c's gelu_grad: Phi(x) = erfc(th + tl) / 2 as in gelu, and
 * phi(x) = e^(-p) (1 - pl - 2 th tl) / sqrt(2 pi), since x^2/2 = (th + tl)^2 and th^2 = p + pl
 * (rounding th^2 would cost up to 9 bits of e^(-x^2/2) near underflow); e^(-p) is multiplied
 * last, so a subnormal x phi(x) is rounded once more only. From |x| = 40 on
 * (where th tl could overflow) gelu' rounds to its limits, 1 and -0. */
static int32_t gelu_grad(kir_kernel *k, kir_type t, int32_t x)
{
    if (t == KIR_F32)
        return kir_gelu_grad(k, x);
    cdf2 c = cdf2_f64(k, t, x);
    int32_t pl = kir_emit(k, KIR_FMA, t, c.th, c.th, un(k, KIR_NEG, t, c.p)); /* th^2 = p + pl */
    int32_t corr = kir_emit(k, KIR_FMA, t, bin(k, KIR_MUL, t, cst(k, t, -2.0), c.th), c.tl,
                            bin(k, KIR_SUB, t, cst(k, t, 1.0), pl));
    int32_t xc = bin(k, KIR_MUL, t, bin(k, KIR_MUL, t, x, cst(k, t, 0x1.9884533d43651p-2)), corr); /* 1/sqrt(2 pi) */
    int32_t r = kir_emit(k, KIR_FMA, t, xc, c.d, bin(k, KIR_MUL, t, cst(k, t, 0.5), c.s));
    int32_t lim = sel(k, t, cmp(k, KIR_GT, x, cst(k, t, 0.0)), cst(k, t, 1.0), cst(k, t, -0.0));
    return sel(k, t, cmp(k, KIR_GE, un(k, KIR_ABS, t, x), cst(k, t, 40.0)), lim, r);
}

/* ---- Element-wise ops -------------------------------------------------------------------- */

/* Float-only ops (the recorder promotes integer inputs to a float dtype first). */
static int32_t unary_fp(kir_kernel *k, ir_op op, kir_type t, int32_t x)
{
    switch (op) {
    case IR_OP_EXP: return kir_exp(k, x);
    case IR_OP_EXP2: return kir_exp2(k, x);
    case IR_OP_EXPM1: return kir_expm1(k, x);
    case IR_OP_LOG: return kir_log(k, x);
    case IR_OP_LOG2: return kir_log2(k, x);
    case IR_OP_LOG1P: return kir_log1p(k, x);
    case IR_OP_SQRT: return un(k, KIR_SQRT, t, x);
    case IR_OP_RSQRT: return bin(k, KIR_DIV, t, cst(k, t, 1.0), un(k, KIR_SQRT, t, x));
    case IR_OP_RECIPROCAL: return bin(k, KIR_DIV, t, cst(k, t, 1.0), x);
    case IR_OP_SIN: return kir_sin(k, x);
    case IR_OP_COS: return kir_cos(k, x);
    case IR_OP_TAN: return kir_tan(k, x);
    case IR_OP_TANH: return kir_tanh(k, x);
    case IR_OP_SIGMOID: return kir_sigmoid(k, x);
    case IR_OP_GELU: return gelu(k, t, x);
    case IR_OP_GELU_GRAD: return gelu_grad(k, t, x);
    case IR_OP_SILU: return bin(k, KIR_MUL, t, x, kir_sigmoid(k, x));
    case IR_OP_ERF: return kir_erf(k, x);
    case IR_OP_FLOOR: return un(k, KIR_FLOOR, t, x);
    case IR_OP_CEIL: return un(k, KIR_CEIL, t, x);
    case IR_OP_ROUND: return un(k, KIR_RINT, t, x); /* half to even, -0.3 -> -0 as numpy */
    default: return -1;
    }
}

int32_t kir_unary_op_to(kir_kernel *k, ir_op op, kir_type t, int32_t x, const int32_t *scalars, burnc_dtype_t to)
{
    if (op == IR_OP_GELU && t == KIR_F32 && (to == BURNC_DTYPE_F16 || to == BURNC_DTYPE_BF16))
        return kir_gelu16(k, x);
    return kir_unary_op(k, op, t, x, scalars);
}

/* CAST gives x: like every op's result, the caller converts it to the record's dtype (with
 * one rounding: a store, or KIR_CONVERT). LOGICAL_NOT gives BOOL, the rest t. */
int32_t kir_unary_op(kir_kernel *k, ir_op op, kir_type t, int32_t x, const int32_t *scalars)
{
    if (op == IR_OP_CAST)
        return x;
    if (op == IR_OP_LOGICAL_NOT)
        return t == KIR_BOOL ? un(k, KIR_NOT, t, x) : cmp(k, KIR_EQ, x, cst(k, t, 0));
    if (!is_fp(t) && !is_int(t))
        return -1; /* bool takes only the two above */
    switch (op) {
    case IR_OP_NEG: return un(k, KIR_NEG, t, x);
    case IR_OP_ABS: return un(k, KIR_ABS, t, x);
    case IR_OP_SIGN: return sign(k, t, x);
    case IR_OP_RELU: return extremum(k, t, x, cst(k, t, 0), true);
    case IR_OP_CLAMP:
        if (!scalars)
            return -1;
        return extremum(k, t, extremum(k, t, x, scalars[0], true), scalars[1], false);
    case IR_OP_FLOOR:
    case IR_OP_CEIL:
    case IR_OP_ROUND:
        if (!is_fp(t))
            return x; /* integers are already whole */
        return unary_fp(k, op, t, x);
    default: return is_fp(t) ? unary_fp(k, op, t, x) : -1;
    }
}

int kir_op_insts(ir_op op, kir_type t, burnc_dtype_t to)
{
    kir_kernel s;
    kir_init(&s, 1, 1);
    int32_t x = kir_type_is_float(t) ? kir_const_f(&s, t, 0.5) : kir_const_i(&s, t, 1), sc[2] = {x, x};
    int before = s.n_insts;
    if (ir_op_class(op) == IR_CLASS_UNARY)
        kir_unary_op_to(&s, op, t, x, sc, to);
    else
        kir_binary_op(&s, op, t, x, x);
    int n = s.n_insts - before + 1;
    kir_free(&s);
    return n;
}

/* Comparisons and logical ops give BOOL, the rest t. */
int32_t kir_binary_op(kir_kernel *k, ir_op op, kir_type t, int32_t a, int32_t b)
{
    switch (op) {
    case IR_OP_EQ: return cmp(k, KIR_EQ, a, b);
    case IR_OP_NE: return cmp(k, KIR_NE, a, b);
    case IR_OP_LT: return cmp(k, KIR_LT, a, b);
    case IR_OP_LE: return cmp(k, KIR_LE, a, b);
    case IR_OP_GT: return cmp(k, KIR_GT, a, b);
    case IR_OP_GE: return cmp(k, KIR_GE, a, b);
    case IR_OP_LOGICAL_AND: return bin(k, KIR_AND, KIR_BOOL, truth(k, t, a), truth(k, t, b));
    case IR_OP_LOGICAL_OR: return bin(k, KIR_OR, KIR_BOOL, truth(k, t, a), truth(k, t, b));
    case IR_OP_LOGICAL_XOR: return bin(k, KIR_XOR, KIR_BOOL, truth(k, t, a), truth(k, t, b));
    default: break;
    }
    if (!is_fp(t) && !is_int(t))
        return -1;
    switch (op) {
    case IR_OP_ADD: return bin(k, KIR_ADD, t, a, b);
    case IR_OP_SUB: return bin(k, KIR_SUB, t, a, b);
    case IR_OP_MUL: return bin(k, KIR_MUL, t, a, b);
    case IR_OP_DIV: return bin(k, KIR_DIV, t, a, b);
    case IR_OP_MAXIMUM: return extremum(k, t, a, b, true);
    case IR_OP_MINIMUM: return extremum(k, t, a, b, false);
    case IR_OP_REMAINDER: return is_fp(t) ? remainder_fp(k, t, a, b) : bin(k, KIR_REM, t, a, b);
    case IR_OP_POW: return is_fp(t) ? kir_pow(k, a, b) : int_pow(k, t, a, b);
    case IR_OP_ATAN2: return is_fp(t) ? kir_atan2(k, a, b) : -1;
    default: return -1;
    }
}

/* ---- Philox 4x32-10 ---------------------------------------------------------------------- */

enum { PHILOX_ROUNDS = 10 };
static const uint32_t PHILOX_M0 = 0xD2511F53u;
static const uint32_t PHILOX_M1 = 0xCD9E8D57u;
static const uint32_t PHILOX_W0 = 0x9E3779B9u;
static const uint32_t PHILOX_W1 = 0xBB67AE85u;

/* The low and high U32 halves of an integer value, through U64. */
static void split64(kir_kernel *k, int32_t v, int32_t *lo, int32_t *hi)
{
    v = as_type(k, v, KIR_U64);
    *lo = un(k, KIR_CONVERT, KIR_U32, v);
    *hi = un(k, KIR_CONVERT, KIR_U32, bin(k, KIR_SHR, KIR_U64, v, kir_const_i(k, KIR_U64, 32)));
}

bool kir_philox_block(kir_kernel *k, int32_t counter, int32_t key, int32_t out[4])
{
    int32_t c[4], kw[2];
    split64(k, counter, &c[0], &c[1]);
    split64(k, key, &kw[0], &kw[1]);
    c[2] = c[3] = kir_const_i(k, KIR_U32, 0);
    int32_t m0 = kir_const_i(k, KIR_U32, PHILOX_M0), m1 = kir_const_i(k, KIR_U32, PHILOX_M1);
    int32_t w0 = kir_const_i(k, KIR_U32, PHILOX_W0), w1 = kir_const_i(k, KIR_U32, PHILOX_W1);
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) { /* the first round uses the key as given */
            kw[0] = bin(k, KIR_ADD, KIR_U32, kw[0], w0);
            kw[1] = bin(k, KIR_ADD, KIR_U32, kw[1], w1);
        }
        int32_t hi0 = bin(k, KIR_MULHI, KIR_U32, m0, c[0]), lo0 = bin(k, KIR_MUL, KIR_U32, m0, c[0]);
        int32_t hi1 = bin(k, KIR_MULHI, KIR_U32, m1, c[2]), lo1 = bin(k, KIR_MUL, KIR_U32, m1, c[2]);
        int32_t n0 = bin(k, KIR_XOR, KIR_U32, bin(k, KIR_XOR, KIR_U32, hi1, c[1]), kw[0]);
        int32_t n2 = bin(k, KIR_XOR, KIR_U32, bin(k, KIR_XOR, KIR_U32, hi0, c[3]), kw[1]);
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
    for (int j = 0; j < 4; j++)
        out[j] = c[j];
    return c[0] >= 0 && c[1] >= 0 && c[2] >= 0 && c[3] >= 0;
}

int32_t kir_philox(kir_kernel *k, int32_t counter, int32_t key, int word)
{
    int32_t w[4];
    if (word < 0 || word > 3 || !kir_philox_block(k, counter, key, w))
        return -1;
    return w[word];
}

/* ---- rand / randn ------------------------------------------------------------------------ */

/* (hi:lo) >> 11 as U64: the top 53 bits of two words. */
static int32_t top53(kir_kernel *k, int32_t lo, int32_t hi)
{
    int32_t h = bin(k, KIR_SHL, KIR_U64, un(k, KIR_CONVERT, KIR_U64, hi), kir_const_i(k, KIR_U64, 32));
    int32_t v = bin(k, KIR_OR, KIR_U64, h, un(k, KIR_CONVERT, KIR_U64, lo));
    return bin(k, KIR_SHR, KIR_U64, v, kir_const_i(k, KIR_U64, 11));
}

/* (w >> shift) + add, times 2^-bits, in F32: exact (fewer than 25 significant bits). */
static int32_t word_fraction(kir_kernel *k, int32_t w, int shift, int add, int bits)
{
    int32_t v = bin(k, KIR_SHR, KIR_U32, w, kir_const_i(k, KIR_U32, shift));
    if (add)
        v = bin(k, KIR_ADD, KIR_U32, v, kir_const_i(k, KIR_U32, add));
    return bin(k, KIR_MUL, KIR_F32, un(k, KIR_CONVERT, KIR_F32, v), kir_const_f(k, KIR_F32, ldexp(1.0, -bits)));
}

/* (top53 + add) * 2^-53 in F64: exact. */
static int32_t top53_fraction(kir_kernel *k, int32_t lo, int32_t hi, int add)
{
    int32_t v = top53(k, lo, hi);
    if (add)
        v = bin(k, KIR_ADD, KIR_U64, v, kir_const_i(k, KIR_U64, add));
    return bin(k, KIR_MUL, KIR_F64, un(k, KIR_CONVERT, KIR_F64, v), kir_const_f(k, KIR_F64, ldexp(1.0, -53)));
}

static bool rand_block(kir_kernel *k, int32_t key, int32_t offset, int32_t index, int32_t w[4])
{
    int32_t ctr = bin(k, KIR_ADD, KIR_U64, as_type(k, offset, KIR_U64), as_type(k, index, KIR_U64));
    return kir_philox_block(k, ctr, key, w);
}

int32_t kir_rand_uniform(kir_kernel *k, int32_t key, int32_t offset, int32_t index, burnc_dtype_t dt)
{
    int32_t w[4];
    if (!rand_block(k, key, offset, index, w))
        return -1;
    switch (dt) {
    case BURNC_DTYPE_F64: return top53_fraction(k, w[0], w[1], 0);
    case BURNC_DTYPE_F16: return word_fraction(k, w[0], 21, 0, 11);
    case BURNC_DTYPE_BF16: return word_fraction(k, w[0], 24, 0, 8);
    default: return word_fraction(k, w[0], 8, 0, 24);
    }
}

static const double TWO_PI = 6.28318530717958647692;

int32_t kir_rand_normal(kir_kernel *k, int32_t key, int32_t offset, int32_t index, burnc_dtype_t dt)
{
    int32_t w[4];
    if (!rand_block(k, key, offset, index, w))
        return -1;
    bool f64 = dt == BURNC_DTYPE_F64;
    kir_type t = KIR_F64; /* like the reference: Box-Muller in double, rounded once by the caller */
    /* u1 in (0, 1] so the log is finite; the 24-bit fractions are exact in F64. */
    int32_t u1 = f64 ? top53_fraction(k, w[0], w[1], 1) : un(k, KIR_CONVERT, t, word_fraction(k, w[0], 8, 1, 24));
    int32_t u2 = f64 ? top53_fraction(k, w[2], w[3], 0) : un(k, KIR_CONVERT, t, word_fraction(k, w[2], 8, 0, 24));
    int32_t radius = un(k, KIR_SQRT, t, bin(k, KIR_MUL, t, cst(k, t, -2.0), kir_log(k, u1)));
    int32_t angle = bin(k, KIR_MUL, t, cst(k, t, TWO_PI), u2);
    return bin(k, KIR_MUL, t, radius, kir_cos(k, angle));
}
