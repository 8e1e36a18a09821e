/* The kernel IR interpreter: the executable definition of ir/kernel.h, and the oracle whose
 * results every codegen must equal bitwise.
 *
 * Values live in a union per instruction: f32 as a C float (so each f32 operation is the f32
 * IEEE operation, never a double one rounded later: the build uses -ffp-contract=off and x86-64
 * evaluates float in float), f64 as double, every integer type as a canonical 64-bit pattern
 * (signed types sign-extended, unsigned ones zero-extended, bool 0 or 1), so integer work is
 * done in uint64_t and wrapped back, with no undefined behaviour.
 *
 * Choices the header leaves open, made here (codegens follow them):
 *  - A row with no reduced positions (a reduced extent of 0) reduces to the combiner's identity:
 *    SUM 0, PROD 1, MAX -inf (integers: the type's minimum), MIN +inf (the maximum); ARGMAX
 *    and ARGMIN give position 0. Row stores still run for such rows; element stores do not.
 *  - Combining two partial results l (lower lanes or leaves) and r: SUM l + r, PROD l * r,
 *    MAX numpy's maximum(l, r) = (l > r || isnan(l)) ? l : r, MIN likewise with <. ARG*
 *    keep the better of (value, position) pairs: a NaN beats a number, a larger (smaller)
 *    value beats a smaller (larger) one, equal values (two NaNs included) go to the lower
 *    position; an empty lane holds the identity value with position INT64_MAX, so the result
 *    is the first extreme whatever the grouping.
 *  - Row stores see reduced coordinates 0 (kir_valid guarantees they cannot depend on them).
 *  - A stride class fixes the stride: ZERO reads no argument, UNIT is 1, ANY is the
 *    argument. Row outputs use the outer axes only.
 *  - Within one position (or one row's row stores) every value is computed before any store
 *    writes, so an output may alias an input read at the same position.
 *  - KIR_ARG of BOOL is true for any nonzero .u; of an integer type, .u wrapped; of F32, .f
 *    rounded to nearest even. KIR_CONST reads imm the same way.
 *  - A store converts its value to the slot's dtype with one rounding: f32 values into f32,
 *    f16 and bf16 slots; f64 values into f64, f16 and bf16 slots; integer values into their
 *    own dtype or, rounded once from the exact integer, into f16 and bf16 slots (kir_valid
 *    allows nothing else). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "rt.h"

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "kir_eval needs float arithmetic evaluated in float (FLT_EVAL_METHOD 0, e.g. x86-64 SSE)"
#endif

typedef union kval {
    float s;
    double d;
    uint64_t u;
} kval;

/* ---- Integers ---------------------------------------------------------------------------- */

static uint64_t canon(int t, uint64_t u)
{
    switch (t) {
    case KIR_BOOL: return u != 0;
    case KIR_U8: return u & 0xffu;
    case KIR_U32: return u & 0xffffffffu;
    case KIR_I32: return (u & 0x80000000u) ? (u | ~UINT64_C(0xffffffff)) : (u & 0xffffffffu);
    default: return u;
    }
}

/* uint64 -> int64 by two's complement, without the implementation-defined conversion. */
static int64_t sval(uint64_t u)
{
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static bool is_signed_int(int t) { return t == KIR_I32 || t == KIR_I64; }
static bool is_fp(int t) { return t == KIR_F32 || t == KIR_F64; }

static int width(int t) { return t == KIR_U8 ? 8 : (t == KIR_I32 || t == KIR_U32) ? 32 : 64; }

/* Floor division and remainder (Python's // and %), 0 for a zero divisor; the minimum
 * divided by -1 wraps (and leaves remainder 0). */
/* The high 64 bits of a 64x64 product, from 32-bit halves. */
static uint64_t mulhi64(uint64_t a, uint64_t b)
{
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

static uint64_t shr(int t, uint64_t a, unsigned c)
{
    if (!is_signed_int(t))
        return a >> c;
    int64_t s = sval(a);
    return (uint64_t)(s < 0 ? ~(~s >> c) : s >> c); /* arithmetic, without relying on >> of negatives */
}

static uint64_t int_binary(int op, int t, uint64_t a, uint64_t b)
{
    bool sg = is_signed_int(t);
    switch (op) {
    case KIR_ADD: return canon(t, a + b);
    case KIR_SUB: return canon(t, a - b);
    case KIR_MUL: return canon(t, a * b);
    case KIR_DIV:
        if (sg)
            return canon(t, (uint64_t)ir_floor_div(sval(a), sval(b)));
        return b ? a / b : 0;
    case KIR_REM:
        if (sg)
            return canon(t, (uint64_t)ir_floor_mod(sval(a), sval(b)));
        return b ? a % b : 0;
    case KIR_MULHI: return t == KIR_U32 ? (a * b) >> 32 : mulhi64(a, b);
    case KIR_AND: return a & b;
    case KIR_OR: return a | b;
    case KIR_XOR: return canon(t, a ^ b);
    case KIR_SHL: return canon(t, a << (b & (uint64_t)(width(t) - 1)));
    case KIR_SHR: return canon(t, shr(t, a, (unsigned)(b & (uint64_t)(width(t) - 1))));
    default: return 0;
    }
}

static bool int_compare(int op, int t, uint64_t a, uint64_t b)
{
    int c;
    if (is_signed_int(t))
        c = (sval(a) > sval(b)) - (sval(a) < sval(b));
    else
        c = (a > b) - (a < b);
    switch (op) {
    case KIR_EQ: return c == 0;
    case KIR_NE: return c != 0;
    case KIR_LT: return c < 0;
    case KIR_LE: return c <= 0;
    case KIR_GT: return c > 0;
    default: return c >= 0;
    }
}

/* ---- Floats ------------------------------------------------------------------------------ */

/* Round half to even, independent of the thread's rounding mode (x - floor(x) is exact). */
static double rint_even(double x)
{
    double r = floor(x), f = x - r;
    if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return copysign(r, x);
}

static float rint_even_f(float x)
{
    float r = floorf(x), f = x - r;
    if (f > 0.5f || (f == 0.5f && fmodf(r, 2.0f) != 0.0f))
        r += 1.0f;
    return copysignf(r, x);
}

static double fp_get(int t, kval v) { return t == KIR_F32 ? (double)v.s : v.d; }

static kval fp_unary(int op, int t, kval a)
{
    kval r = {0};
    if (t == KIR_F32) {
        float x = a.s;
        switch (op) {
        case KIR_NEG: r.s = -x; break;
        case KIR_ABS: r.s = fabsf(x); break;
        case KIR_SQRT: r.s = sqrtf(x); break;
        case KIR_FLOOR: r.s = floorf(x); break;
        case KIR_CEIL: r.s = ceilf(x); break;
        case KIR_TRUNC: r.s = truncf(x); break;
        case KIR_RINT: r.s = rint_even_f(x); break;
        default: break;
        }
        return r;
    }
    double x = a.d;
    switch (op) {
    case KIR_NEG: r.d = -x; break;
    case KIR_ABS: r.d = fabs(x); break;
    case KIR_SQRT: r.d = sqrt(x); break;
    case KIR_FLOOR: r.d = floor(x); break;
    case KIR_CEIL: r.d = ceil(x); break;
    case KIR_TRUNC: r.d = trunc(x); break;
    case KIR_RINT: r.d = rint_even(x); break;
    default: break;
    }
    return r;
}

static kval fp_binary(int op, int t, kval a, kval b)
{
    kval r = {0};
    if (t == KIR_F32) {
        switch (op) {
        case KIR_ADD: r.s = a.s + b.s; break;
        case KIR_SUB: r.s = a.s - b.s; break;
        case KIR_MUL: r.s = a.s * b.s; break;
        case KIR_DIV: r.s = a.s / b.s; break;
        case KIR_REM: r.s = fmodf(a.s, b.s); break;
        default: break;
        }
        return r;
    }
    switch (op) {
    case KIR_ADD: r.d = a.d + b.d; break;
    case KIR_SUB: r.d = a.d - b.d; break;
    case KIR_MUL: r.d = a.d * b.d; break;
    case KIR_DIV: r.d = a.d / b.d; break;
    case KIR_REM: r.d = fmod(a.d, b.d); break;
    default: break;
    }
    return r;
}

/* Ordered comparisons (false with a NaN) except NE; f32 values widen to double exactly. */
static bool fp_compare(int op, double a, double b)
{
    switch (op) {
    case KIR_EQ: return a == b;
    case KIR_NE: return a != b;
    case KIR_LT: return a < b;
    case KIR_LE: return a <= b;
    case KIR_GT: return a > b;
    default: return a >= b;
    }
}

/* ---- Conversions ------------------------------------------------------------------------- */

static uint64_t float_to_int(int to, double v)
{
    switch (to) {
    case KIR_BOOL: return v != 0; /* NaN is true */
    case KIR_U8: return (uint64_t)ir_trunc_sat(v, 0, UINT8_MAX);
    case KIR_I32: return (uint64_t)ir_trunc_sat(v, INT32_MIN, INT32_MAX);
    case KIR_U32: return (uint64_t)ir_trunc_sat(v, 0, UINT32_MAX);
    case KIR_I64: return (uint64_t)ir_trunc_sat(v, INT64_MIN, INT64_MAX);
    default: return ir_trunc_sat_u64(v);
    }
}

/* Integer -> float, rounded once to nearest even from the exact integer. */
static kval int_to_float(int to, int from, uint64_t u)
{
    kval r;
    if (is_signed_int(from)) {
        if (to == KIR_F32)
            r.s = (float)sval(u);
        else
            r.d = (double)sval(u);
    } else {
        if (to == KIR_F32)
            r.s = (float)u;
        else
            r.d = (double)u;
    }
    return r;
}

static kval convert(int to, int from, kval a)
{
    kval r;
    if (is_fp(from)) {
        if (to == KIR_F32)
            r.s = from == KIR_F32 ? a.s : (float)a.d;
        else if (to == KIR_F64)
            r.d = fp_get(from, a);
        else
            r.u = float_to_int(to, fp_get(from, a));
        return r;
    }
    if (is_fp(to))
        return int_to_float(to, from, a.u);
    r.u = canon(to, a.u);
    return r;
}

static kval bitcast(int to, int from, kval a)
{
    kval r;
    if (from == KIR_F32) {
        uint32_t w;
        memcpy(&w, &a.s, sizeof w);
        r.u = canon(to, w);
    } else if (to == KIR_F32) {
        uint32_t w = (uint32_t)a.u;
        memcpy(&r.s, &w, sizeof w);
    } else if (from == KIR_F64) {
        memcpy(&r.u, &a.d, sizeof r.u);
        r.u = canon(to, r.u);
    } else if (to == KIR_F64) {
        memcpy(&r.d, &a.u, sizeof r.d);
    } else {
        r.u = canon(to, a.u);
    }
    return r;
}

/* f32 rounded to the precision and range of f16 or bf16 (and widened back exactly). */
static float round_narrow(float x, int fmt)
{
    if (fmt == KIR_F16)
        return (float)ir_f16_to_f64(ir_f64_to_f16(x));
    return (float)ir_bf16_to_f64(ir_f64_to_bf16(x));
}

/* ---- The interpreter's state ------------------------------------------------------------- */

enum { MAX_PURPOSES = KIR_MAX_STAGES + 2 };

/* Which instructions one purpose needs, in order: stage s (purpose s), the element stores
 * (purpose n_stages) or the row stores (purpose n_stages + 1). */
typedef struct plan {
    int n;
    int32_t *list;
} plan;

typedef struct ev {
    const kir_kernel *k;
    const kir_args *a;
    kval *vals;
    plan plans[MAX_PURPOSES];
    int64_t pos[BURNC_MAX_RANK];
    int64_t row_len;
    kval reduced[KIR_MAX_STAGES];
    int64_t in_stride[KIR_MAX_INPUTS][BURNC_MAX_RANK];
    int64_t out_stride[KIR_MAX_OUTPUTS][BURNC_MAX_RANK];
    bool null_buffer; /* a load or store met a NULL base address */
} ev;

static int64_t class_stride(uint8_t cls, int64_t arg)
{
    return cls == KIR_STRIDE_ZERO ? 0 : cls == KIR_STRIDE_UNIT ? 1 : arg;
}

static const char *input_addr(ev *e, int slot)
{
    const kir_kernel *k = e->k;
    const char *base = e->a->inputs[slot];
    if (!base) {
        e->null_buffer = true;
        return NULL;
    }
    int64_t off = e->a->in_offsets[slot];
    for (int d = 0; d < k->rank; d++)
        off += e->pos[d] * e->in_stride[slot][d];
    return base + off * (int64_t)ir_dtype_size(k->inputs[slot].dtype);
}

static char *output_addr(ev *e, int slot, bool row)
{
    const kir_kernel *k = e->k;
    char *base = e->a->outputs[slot];
    if (!base) {
        e->null_buffer = true;
        return NULL;
    }
    int64_t off = e->a->out_offsets[slot];
    for (int d = 0; d < (row ? k->n_outer : k->rank); d++)
        off += e->pos[d] * e->out_stride[slot][d];
    return base + off * (int64_t)ir_dtype_size(k->outputs[slot].dtype);
}

static kval load(ev *e, int slot)
{
    kval r = {0};
    const char *p = input_addr(e, slot);
    if (!p)
        return r;
    burnc_dtype_t dt = e->k->inputs[slot].dtype;
    switch (dt) {
    case BURNC_DTYPE_F32: memcpy(&r.s, p, sizeof r.s); break;
    case BURNC_DTYPE_F64: memcpy(&r.d, p, sizeof r.d); break;
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: r.s = (float)ir_load_f(p, dt); break; /* exact */
    default: r.u = (uint64_t)ir_load_i(p, dt); break; /* i32 sign-extends, bool is 0/1 */
    }
    return r;
}

/* Rounds v (of type t) once into the slot's dtype; kir_valid allowed only the pairs below. */
static void store(ev *e, const kir_store *st, int t, kval v)
{
    char *p = output_addr(e, st->slot, st->row);
    if (!p)
        return;
    burnc_dtype_t dt = e->k->outputs[st->slot].dtype;
    if (t == KIR_F32) {
        ir_store_f(p, dt, v.s); /* f32 exactly, or one rounding to f16/bf16 */
    } else if (t == KIR_F64) {
        ir_store_f(p, dt, v.d);
    } else if (t == KIR_U64 && v.u > INT64_MAX) {
        /* ir_store_i takes int64: halve with the lost bit kept as a sticky bit (it lies far
         * below any f16/bf16 rounding position), round, then double exactly. */
        ir_store_i(p, dt, (int64_t)((v.u >> 1) | (v.u & 1)));
        ir_store_f(p, dt, 2.0 * ir_load_f(p, dt));
    } else {
        ir_store_i(p, dt, sval(v.u)); /* integers wrap (values are canonical), or round once */
    }
}

/* ---- One instruction --------------------------------------------------------------------- */

static kval eval_leaf(ev *e, const kir_inst *in)
{
    kval r = {0};
    switch (in->op) {
    case KIR_LOAD: return load(e, in->a);
    case KIR_CONST:
        if (in->type == KIR_F32)
            r.s = (float)in->imm.f;
        else if (in->type == KIR_F64)
            r.d = in->imm.f;
        else
            r.u = canon(in->type, in->imm.u);
        return r;
    case KIR_ARG: {
        kir_scalar s = e->a->scalars[in->a];
        if (in->type == KIR_F32)
            r.s = (float)s.f;
        else if (in->type == KIR_F64)
            r.d = s.f;
        else
            r.u = canon(in->type, s.u);
        return r;
    }
    case KIR_INDEX: r.u = (uint64_t)e->pos[in->a]; return r;
    case KIR_EXTENT: r.u = (uint64_t)e->a->extents[in->a]; return r;
    case KIR_ROW_LEN: r.u = (uint64_t)e->row_len; return r;
    default: return e->reduced[in->a]; /* KIR_REDUCED */
    }
}

static kval eval_inst(ev *e, const kir_inst *in)
{
    if (in->op <= KIR_REDUCED)
        return eval_leaf(e, in);
    const kval *v = e->vals;
    int t = in->type;
    kval r = {0};
    switch (in->op) {
    case KIR_CONVERT: return convert(t, e->k->insts[in->a].type, v[in->a]);
    case KIR_BITCAST: return bitcast(t, e->k->insts[in->a].type, v[in->a]);
    case KIR_ROUND: r.s = round_narrow(v[in->a].s, (int)in->imm.i); return r;
    case KIR_NOT: r.u = canon(t, t == KIR_BOOL ? !v[in->a].u : ~v[in->a].u); return r;
    case KIR_SELECT: return v[in->a].u ? v[in->b] : v[in->c];
    case KIR_FMA:
        if (t == KIR_F32)
            r.s = fmaf(v[in->a].s, v[in->b].s, v[in->c].s);
        else
            r.d = fma(v[in->a].d, v[in->b].d, v[in->c].d);
        return r;
    case KIR_EQ:
    case KIR_NE:
    case KIR_LT:
    case KIR_LE:
    case KIR_GT:
    case KIR_GE: {
        int ta = e->k->insts[in->a].type;
        if (is_fp(ta))
            r.u = fp_compare(in->op, fp_get(ta, v[in->a]), fp_get(ta, v[in->b]));
        else
            r.u = int_compare(in->op, ta, v[in->a].u, v[in->b].u);
        return r;
    }
    case KIR_NEG:
    case KIR_ABS:
        if (is_fp(t))
            return fp_unary(in->op, t, v[in->a]);
        if (in->op == KIR_NEG || (is_signed_int(t) && sval(v[in->a].u) < 0))
            r.u = canon(t, 0 - v[in->a].u);
        else
            r.u = v[in->a].u;
        return r;
    case KIR_SQRT:
    case KIR_FLOOR:
    case KIR_CEIL:
    case KIR_TRUNC:
    case KIR_RINT: return fp_unary(in->op, t, v[in->a]);
    default: /* binary arithmetic and bit operations */
        if (is_fp(t))
            return fp_binary(in->op, t, v[in->a], v[in->b]);
        r.u = int_binary(in->op, t, v[in->a].u, v[in->b].u);
        return r;
    }
}

static void run_plan(ev *e, int purpose)
{
    const plan *p = &e->plans[purpose];
    for (int j = 0; j < p->n; j++)
        e->vals[p->list[j]] = eval_inst(e, &e->k->insts[p->list[j]]);
}

/* ---- Reduction --------------------------------------------------------------------------- */

typedef struct acc {
    kval v;
    int64_t pos;
} acc;

static bool is_arg(int comb) { return comb == KIR_COMBINE_ARGMAX || comb == KIR_COMBINE_ARGMIN; }
static bool wants_max(int comb) { return comb == KIR_COMBINE_MAX || comb == KIR_COMBINE_ARGMAX; }

static acc identity(int comb, int t)
{
    acc r = {.pos = INT64_MAX};
    bool hi = !wants_max(comb); /* MIN and ARGMIN start from the top */
    switch (comb) {
    case KIR_COMBINE_SUM:
    case KIR_COMBINE_PROD: {
        kval c = {.u = comb == KIR_COMBINE_PROD};
        r.v = is_fp(t) ? convert(t, KIR_U64, c) : c;
        return r;
    }
    default:
        if (t == KIR_F32)
            r.v.s = hi ? INFINITY : -INFINITY;
        else if (t == KIR_F64)
            r.v.d = hi ? INFINITY : -INFINITY;
        else if (is_signed_int(t))
            r.v.u = canon(t, hi ? (UINT64_MAX >> (65 - width(t))) : (UINT64_C(1) << (width(t) - 1)));
        else
            r.v.u = hi ? canon(t, UINT64_MAX) : 0;
        return r;
    }
}

/* Whether r beats l for ARGMAX (max) or ARGMIN: see the file comment. */
static bool arg_better(bool max, int t, acc l, acc r)
{
    if (is_fp(t)) {
        double a = fp_get(t, l.v), b = fp_get(t, r.v);
        if (isnan(a) || isnan(b))
            return isnan(b) && (!isnan(a) || r.pos < l.pos);
        if (a != b)
            return max ? b > a : b < a;
        return r.pos < l.pos;
    }
    if (int_compare(KIR_EQ, t, l.v.u, r.v.u))
        return r.pos < l.pos;
    return int_compare(max ? KIR_GT : KIR_LT, t, r.v.u, l.v.u);
}

static acc combine(int comb, int t, acc l, acc r)
{
    switch (comb) {
    case KIR_COMBINE_SUM:
    case KIR_COMBINE_PROD: {
        int op = comb == KIR_COMBINE_SUM ? KIR_ADD : KIR_MUL;
        if (is_fp(t))
            l.v = fp_binary(op, t, l.v, r.v);
        else
            l.v.u = int_binary(op, t, l.v.u, r.v.u);
        return l;
    }
    case KIR_COMBINE_MAX:
    case KIR_COMBINE_MIN: {
        int cmp = comb == KIR_COMBINE_MAX ? KIR_GT : KIR_LT;
        bool keep_l = is_fp(t) ? (fp_compare(cmp, fp_get(t, l.v), fp_get(t, r.v)) || isnan(fp_get(t, l.v)))
                               : int_compare(cmp, t, l.v.u, r.v.u);
        return keep_l ? l : r;
    }
    default: return arg_better(comb == KIR_COMBINE_ARGMAX, t, l, r) ? r : l;
    }
}

/* Pairwise tree over a[0..n): neighbours combine, an odd last element is carried up. */
static acc tree(int comb, int t, acc *a, int64_t n)
{
    while (n > 1) {
        int64_t m = 0;
        for (int64_t i = 0; i + 1 < n; i += 2)
            a[m++] = combine(comb, t, a[i], a[i + 1]);
        if (n & 1)
            a[m++] = a[n - 1];
        n = m;
    }
    return a[0];
}

/* Sets the reduced coordinates to position j of the row (row-major over the reduced axes). */
static void set_reduced_pos(ev *e, int64_t j)
{
    for (int d = e->k->rank - 1; d >= e->k->n_outer; d--) {
        int64_t ext = e->a->extents[d];
        e->pos[d] = j % ext;
        j /= ext;
    }
}

static kval run_stage(ev *e, int s, acc *leaves)
{
    const kir_kernel *k = e->k;
    int comb = k->stages[s].combiner, value = k->stages[s].value;
    int t = k->insts[value].type;
    int64_t n = e->row_len, n_leaves = (n + KIR_LEAF - 1) / KIR_LEAF;
    for (int64_t l = 0; l < n_leaves; l++) {
        acc lanes[KIR_LANES];
        for (int i = 0; i < KIR_LANES; i++)
            lanes[i] = identity(comb, t);
        int64_t end = (l + 1) * KIR_LEAF < n ? (l + 1) * KIR_LEAF : n;
        for (int64_t j = l * KIR_LEAF; j < end; j++) {
            set_reduced_pos(e, j);
            run_plan(e, s);
            acc x = {e->vals[value], j};
            lanes[j % KIR_LANES] = combine(comb, t, lanes[j % KIR_LANES], x);
        }
        leaves[l] = tree(comb, t, lanes, KIR_LANES);
    }
    acc r = n_leaves ? tree(comb, t, leaves, n_leaves) : identity(comb, t);
    if (!is_arg(comb))
        return r.v;
    kval p = {.u = r.pos == INT64_MAX ? 0 : (uint64_t)r.pos};
    return p;
}

/* ---- Rows -------------------------------------------------------------------------------- */

static void run_stores(ev *e, bool row)
{
    const kir_kernel *k = e->k;
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row == row)
            store(e, &k->stores[s], k->insts[k->stores[s].value].type, e->vals[k->stores[s].value]);
}

static void run_row(ev *e, int64_t row, acc *leaves, bool has_elem, bool has_row)
{
    const kir_kernel *k = e->k;
    for (int d = k->n_outer - 1; d >= 0; d--) {
        e->pos[d] = row % e->a->extents[d];
        row /= e->a->extents[d];
    }
    for (int s = 0; s < k->n_stages; s++)
        e->reduced[s] = run_stage(e, s, leaves);
    for (int64_t j = 0; has_elem && j < e->row_len; j++) {
        set_reduced_pos(e, j);
        run_plan(e, k->n_stages);
        run_stores(e, false);
    }
    if (has_row) {
        for (int d = k->n_outer; d < k->rank; d++)
            e->pos[d] = 0;
        run_plan(e, k->n_stages + 1);
        run_stores(e, true);
    }
}

/* ---- Setup ------------------------------------------------------------------------------- */


/* The instructions the roots marked in need[] read, transitively, listed in order. */
static plan make_plan(const kir_kernel *k, uint8_t *need, int32_t *list)
{
    for (int i = k->n_insts - 1; i >= 0; i--) {
        if (!need[i])
            continue;
        const kir_inst *in = &k->insts[i];
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            need[ops[j]] = 1;
    }
    plan p = {0, list};
    for (int i = 0; i < k->n_insts; i++)
        if (need[i])
            list[p.n++] = i;
    return p;
}

static void make_plans(ev *e, int32_t *lists, uint8_t *need)
{
    const kir_kernel *k = e->k;
    size_t n = (size_t)k->n_insts;
    for (int p = 0; p < k->n_stages + 2; p++) {
        memset(need, 0, n);
        if (p < k->n_stages) {
            need[k->stages[p].value] = 1;
        } else {
            bool row = p == k->n_stages + 1;
            for (int s = 0; s < k->n_stores; s++)
                if (k->stores[s].row == row)
                    need[k->stores[s].value] = 1;
        }
        e->plans[p] = make_plan(k, need, lists + (size_t)p * n);
    }
}

static bool args_ok(const kir_kernel *k, const kir_args *a)
{
    if (!a || (k->rank > 0 && !a->extents) || (k->n_scalars > 0 && !a->scalars))
        return false;
    if (k->n_inputs > 0 && (!a->inputs || !a->in_offsets || (k->rank > 0 && !a->in_strides)))
        return false;
    if (k->n_outputs > 0 && (!a->outputs || !a->out_offsets || (k->rank > 0 && !a->out_strides)))
        return false;
    for (int d = 0; d < k->rank; d++)
        if (a->extents[d] < 0)
            return false;
    return true;
}

static void set_strides(ev *e)
{
    const kir_kernel *k = e->k;
    for (int s = 0; s < k->n_inputs; s++)
        for (int d = 0; d < k->rank; d++)
            e->in_stride[s][d] = class_stride(k->inputs[s].stride[d], e->a->in_strides[s * k->rank + d]);
    for (int s = 0; s < k->n_outputs; s++)
        for (int d = 0; d < k->rank; d++)
            e->out_stride[s][d] = class_stride(k->outputs[s].stride[d], e->a->out_strides[s * k->rank + d]);
}

/* Product of extents[from..to), false on overflow. */
static bool extent_product(const int64_t *extents, int from, int to, int64_t *out)
{
    int64_t n = 1;
    for (int d = from; d < to; d++)
        if (__builtin_mul_overflow(n, extents[d], &n))
            return false;
    *out = n;
    return true;
}

static burnc_status_t run_all(ev *e)
{
    const kir_kernel *k = e->k;
    int64_t rows, n, total;
    if (!extent_product(e->a->extents, 0, k->n_outer, &rows) ||
        !extent_product(e->a->extents, k->n_outer, k->rank, &n) || __builtin_mul_overflow(rows, n, &total))
        return rt_fail(BURNC_ERR_INTERNAL, "kir_eval %s: extents overflow", k->name);
    e->row_len = n;
    set_strides(e);
    bool has_elem = false, has_row = false;
    for (int s = 0; s < k->n_stores; s++)
        *(k->stores[s].row ? &has_row : &has_elem) = true;
    int64_t n_leaves = k->n_stages > 0 ? (n + KIR_LEAF - 1) / KIR_LEAF : 0;
    acc *leaves = malloc((size_t)(n_leaves > 0 ? n_leaves : 1) * sizeof *leaves);
    if (!leaves)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "kir_eval %s: no memory for %lld leaves", k->name,
                       (long long)n_leaves);
    for (int64_t r = 0; r < rows && !e->null_buffer; r++)
        run_row(e, r, leaves, has_elem, has_row);
    free(leaves);
    if (e->null_buffer)
        return rt_fail(BURNC_ERR_INTERNAL, "kir_eval %s: a slot that is read or written has no buffer", k->name);
    return BURNC_OK;
}

burnc_status_t kir_eval(const kir_kernel *k, const kir_args *args)
{
    char why[256];
    if (!k || !kir_valid(k, why, sizeof why))
        return rt_fail(BURNC_ERR_INTERNAL, "kir_eval: invalid kernel %s: %s", k ? k->name : "(null)",
                       k ? why : "no kernel");
    if (!args_ok(k, args))
        return rt_fail(BURNC_ERR_INTERNAL, "kir_eval %s: missing or negative launch arguments", k->name);
    ev e = {.k = k, .a = args};
    size_t n = (size_t)(k->n_insts > 0 ? k->n_insts : 1);
    e.vals = calloc(n, sizeof *e.vals);
    int32_t *lists = malloc(n * MAX_PURPOSES * sizeof *lists);
    uint8_t *need = malloc(n);
    burnc_status_t st;
    if (!e.vals || !lists || !need) {
        st = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "kir_eval %s: no memory for %d instructions", k->name, k->n_insts);
    } else {
        make_plans(&e, lists, need);
        st = run_all(&e);
    }
    free(need);
    free(lists);
    free(e.vals);
    return st;
}
