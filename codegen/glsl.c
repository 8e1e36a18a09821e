/* Kernel IR -> GLSL 450 (see glsl.h), and GLSL -> SPIR-V.
 *
 * The lowering follows ir/kernel_eval.c operation for operation: every float operation is one
 * GLSL operation on a `precise` value (no contraction), integers wrap (u8 is kept in a uint and
 * masked), division and remainder of integers floor, float -> int conversions saturate and map
 * NaN to 0, f16/bf16 are converted with integer bit operations (never the driver's half
 * conversions, whose rounding Vulkan leaves open), and NaN tests look at bits so that no
 * optimizer may assume them away. */
#include <spirv-tools/libspirv.h>
#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>
#include <glslang/build_info.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "glsl.h"
#include "rt.h"

/* ---- A growing string ---- */

typedef struct sb {
    char *s;
    size_t n, cap;
    bool oom;
} sb;

static void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int len = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (len < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)len < b->cap) {
            b->n += (size_t)len;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)len + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* ---- Types ---- */

static const char *gtype(int t)
{
    switch (t) {
    case KIR_BOOL: return "bool";
    case KIR_U8:
    case KIR_U32: return "uint";
    case KIR_I32: return "int";
    case KIR_I64: return "int64_t";
    case KIR_U64: return "uint64_t";
    case KIR_F32: return "float";
    default: return "double";
    }
}

/* The element type of a buffer of dtype dt. */
static const char *mem_type(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F32: return "float";
    case BURNC_DTYPE_F64: return "double";
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return "uint16_t";
    case BURNC_DTYPE_I32: return "int";
    case BURNC_DTYPE_I64: return "int64_t";
    default: return "uint8_t"; /* u8, bool */
    }
}

static bool is_fp(int t) { return t == KIR_F32 || t == KIR_F64; }
static bool is_signed(int t) { return t == KIR_I32 || t == KIR_I64; }

struct emitter;
static int word_shift(const struct emitter *e, burnc_dtype_t dt);

/* Helper functions emitted only when used (a function over double or 64-bit words would ask
 * the device for capabilities the kernel does not need). */
enum {
    H_NARROW = 1 << 0,  /* f32/f64/int -> f16/bf16 bits, f16/bf16 bits -> f32 */
    H_IDIV = 1 << 1,    /* floor division and remainder, i32 and i64 */
    H_MULHI = 1 << 2,
    H_FMOD = 1 << 3,    /* exact fmod, f32 and f64 */
    H_CVT = 1 << 4,     /* saturating float -> int */
    H_ISNAN = 1 << 5,
    H_FMA = 1 << 6,
    H_UDIV = 1 << 7,    /* 32-bit division by an extent's divisor word */
    H_RINT = 1 << 8,    /* f64 round half to even by floor */
};

typedef struct emitter {
    const kir_kernel *k;
    cg_glsl_options opt;
    sb body;
    unsigned helpers;
    bool uses_f64, uses_8bit, uses_16bit;
    int in_base, out_base, scalar_base; /* argument word positions */
} emitter;

/* log2 of the elements of dt in a 32-bit word when the device lacks storage of dt's width
 * (the buffer is then an array of words), else 0. */
static int word_shift(const emitter *e, burnc_dtype_t dt)
{
    if ((dt == BURNC_DTYPE_U8 || dt == BURNC_DTYPE_BOOL) && e->opt.words8)
        return 2;
    if ((dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) && e->opt.words16)
        return 1;
    return 0;
}

/* Argument words: [0] positions (element-wise) or rows, [1] row length, [2..2+rank) extents,
 * [2+rank..2+2 rank) their divisor words (cg_glsl_divisor), then per input (offset,
 * strides[rank]), per output the same, per scalar (raw 64 bits, f32 bits). */
static void layout(const kir_kernel *k, int *in_base, int *out_base, int *scalar_base)
{
    *in_base = 2 + 2 * k->rank;
    *out_base = *in_base + k->n_inputs * (1 + k->rank);
    *scalar_base = *out_base + k->n_outputs * (1 + k->rank);
}

size_t cg_glsl_pass_word(const kir_kernel *k)
{
    int ib, ob, sb_;
    layout(k, &ib, &ob, &sb_);
    return (size_t)(sb_ + 2 * k->n_scalars);
}

size_t cg_glsl_arg_words(const kir_kernel *k) { return cg_glsl_pass_word(k) + (cg_glsl_multipass(k) ? 4 : 0); }

static int64_t class_stride(uint8_t cls, int64_t arg) { return cls == KIR_STRIDE_ZERO ? 0 : cls == KIR_STRIDE_UNIT ? 1 : arg; }

static bool elementwise(const kir_kernel *k)
{
    if (k->n_stages > 0 || k->n_outer != k->rank)
        return false;
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row)
            return false;
    return true;
}

/* Granlund and Montgomery, "Division by invariant integers using multiplication" (1994),
 * figure 4.1 with N = 32: l = ceil(log2 d), m = 2^32 (2^l - d) / d + 1 (below 2^32), s1 =
 * min(l, 1), s2 = max(l - 1, 0). The add indicator's fix-up (n - t) >> s1 keeps m to 32 bits;
 * s1 = 0 only for d = 1, where m = 1 and t = 0. */
int64_t cg_glsl_divisor(int64_t d)
{
    if (d < 1 || d > (int64_t)UINT32_MAX)
        return 0;
    int l = 0;
    while (((int64_t)1 << l) < d)
        l++;
    uint64_t m = ((((uint64_t)1 << l) - (uint64_t)d) << 32) / (uint64_t)d + 1;
    int s1 = l < 1 ? l : 1, s2 = l - s1;
    return (int64_t)(m | (uint64_t)(2 * s2 + s1) << 32);
}

void cg_glsl_pack_args(const kir_kernel *k, const kir_args *a, int64_t *w)
{
    int ib, ob, sbase;
    layout(k, &ib, &ob, &sbase);
    int64_t rows = 1, row_len = 1;
    for (int d = 0; d < k->rank; d++)
        *(d < k->n_outer ? &rows : &row_len) *= a->extents[d];
    w[0] = rows;
    w[1] = row_len;
    for (int d = 0; d < k->rank; d++) {
        w[2 + d] = a->extents[d];
        w[2 + k->rank + d] = cg_glsl_divisor(a->extents[d]);
    }
    for (int s = 0; s < k->n_inputs; s++) {
        w[ib + s * (1 + k->rank)] = a->in_offsets[s];
        for (int d = 0; d < k->rank; d++)
            w[ib + s * (1 + k->rank) + 1 + d] = class_stride(k->inputs[s].stride[d], a->in_strides[s * k->rank + d]);
    }
    for (int o = 0; o < k->n_outputs; o++) {
        w[ob + o * (1 + k->rank)] = a->out_offsets[o];
        for (int d = 0; d < k->rank; d++)
            w[ob + o * (1 + k->rank) + 1 + d] =
                class_stride(k->outputs[o].stride[d], a->out_strides[o * k->rank + d]);
    }
    for (int s = 0; s < k->n_scalars; s++) {
        float f = (float)a->scalars[s].f; /* what an f32 KIR_ARG reads: the value rounded */
        uint32_t fb;
        memcpy(&fb, &f, sizeof fb);
        memcpy(&w[sbase + 2 * s], &a->scalars[s].u, sizeof(int64_t));
        w[sbase + 2 * s + 1] = fb;
    }
    if (cg_glsl_multipass(k))
        memset(&w[sbase + 2 * k->n_scalars], 0, 4 * sizeof *w); /* CG_GLSL_PASS_ROWS */
}

cg_glsl_options cg_glsl_resolve(const cg_glsl_options *opt)
{
    cg_glsl_options o = opt ? *opt : (cg_glsl_options){0};
    if (o.wg_size <= 0)
        o.wg_size = 256;
    o.wg_size = o.wg_size < 32 ? 32 : o.wg_size > 1024 ? 1024 : o.wg_size / 32 * 32;
    if (o.items <= 0)
        o.items = 4;
    o.items = o.items > 16 ? 16 : o.items;
    return o;
}

void cg_glsl_grid(const kir_kernel *k, const cg_glsl_options *opt, const int64_t *extents, uint32_t grid[2])
{
    cg_glsl_options o = cg_glsl_resolve(opt);
    int64_t rows = 1, total = 1;
    for (int d = 0; d < k->rank; d++) {
        total *= extents[d];
        if (d < k->n_outer)
            rows *= extents[d];
    }
    int64_t groups;
    if (elementwise(k))
        groups = total == 0 ? 0 : (total + (int64_t)o.wg_size * o.items - 1) / ((int64_t)o.wg_size * o.items);
    else
        groups = rows < 65535 ? rows : 65535; /* workgroups loop over rows */
    int64_t x = groups < 65535 ? groups : 65535;
    grid[0] = (uint32_t)x;
    grid[1] = x ? (uint32_t)((groups + x - 1) / x) : 0;
}

/* ---- Values ---- */

static const kir_inst *inst(const emitter *e, int i) { return &e->k->insts[i]; }
static int ty(const emitter *e, int i) { return e->k->insts[i].type; }

/* The index of slot s (input or output) at the current position, as GLSL. */
static void index_expr(emitter *e, sb *b, bool output, int s, int naxes)
{
    const kir_kernel *k = e->k;
    int base = (output ? e->out_base : e->in_base) + s * (1 + k->rank);
    const uint8_t *cls = output ? k->outputs[s].stride : k->inputs[s].stride;
    /* in 32-bit arithmetic: an index is below 2^32 (its buffer's elements are), and the low 32
     * bits of a sum of products are the sum of the products of the low 32 bits (64-bit
     * multiplies are emulated on GPUs) */
    sb_printf(b, "(uint(A.w[%d])", base);
    for (int d = 0; d < naxes; d++) {
        if (cls[d] == KIR_STRIDE_UNIT)
            sb_printf(b, " + uint(p%d)", d);
        else if (cls[d] == KIR_STRIDE_ANY)
            sb_printf(b, " + uint(p%d) * uint(A.w[%d])", d, base + 1 + d);
    }
    sb_printf(b, ")");
}

static void const_expr(emitter *e, sb *b, int t, kir_scalar imm)
{
    switch (t) {
    case KIR_BOOL: sb_printf(b, imm.u ? "true" : "false"); break;
    case KIR_U8: sb_printf(b, "%uu", (unsigned)(imm.u & 0xffu)); break;
    case KIR_U32: sb_printf(b, "%uu", (unsigned)(imm.u & 0xffffffffu)); break;
    case KIR_I32: sb_printf(b, "int(%uu)", (unsigned)(imm.u & 0xffffffffu)); break;
    case KIR_I64: sb_printf(b, "int64_t(%lluul)", (unsigned long long)imm.u); break;
    case KIR_U64: sb_printf(b, "%lluul", (unsigned long long)imm.u); break;
    case KIR_F32: {
        float f = (float)imm.f;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        sb_printf(b, "uintBitsToFloat(%uu)", u);
        break;
    }
    default: {
        e->uses_f64 = true;
        uint64_t u;
        memcpy(&u, &imm.f, sizeof u);
        sb_printf(b, "uint64BitsToDouble(%lluul)", (unsigned long long)u);
        break;
    }
    }
}

/* A value of type `from` (expression x) converted to `to` by burnc's cast rules. */
static void convert_expr(emitter *e, sb *b, int to, int from, const char *x)
{
    if (to == from) {
        sb_printf(b, "%s", x);
    } else if (is_fp(from) && is_fp(to)) {
        sb_printf(b, "%s(%s)", gtype(to), x);
    } else if (is_fp(from)) {
        if (to == KIR_BOOL) {
            sb_printf(b, "(!(%s == %s(0)))", x, gtype(from)); /* NaN is true */
        } else {
            e->helpers |= H_CVT;
            static const char *const names[] = {[KIR_U8] = "u8", [KIR_I32] = "i32", [KIR_U32] = "u32",
                                                [KIR_I64] = "i64", [KIR_U64] = "u64"};
            sb_printf(b, "cvt_%s_%s(%s)", names[to], from == KIR_F32 ? "f32" : "f64", x);
        }
    } else if (from == KIR_BOOL) {
        sb_printf(b, "(%s ? %s(1) : %s(0))", x, gtype(to), gtype(to));
    } else if (to == KIR_BOOL) {
        sb_printf(b, "(%s != %s(0))", x, gtype(from));
    } else if (is_fp(to)) {
        sb_printf(b, "%s(%s)", gtype(to), x); /* int -> float rounds to nearest */
    } else if (to == KIR_U8) {
        sb_printf(b, "(uint(%s) & 0xffu)", x);
    } else if (from == KIR_I32 && to == KIR_U64) {
        sb_printf(b, "uint64_t(int64_t(%s))", x); /* the canonical pattern is sign-extended */
    } else {
        sb_printf(b, "%s(%s)", gtype(to), x);
    }
}

static void bitcast_expr(sb *b, int to, int from, const char *x)
{
    if (from == KIR_F32)
        sb_printf(b, to == KIR_I32 ? "floatBitsToInt(%s)" : "floatBitsToUint(%s)", x);
    else if (to == KIR_F32)
        sb_printf(b, from == KIR_I32 ? "intBitsToFloat(%s)" : "uintBitsToFloat(%s)", x);
    else if (from == KIR_F64)
        sb_printf(b, to == KIR_I64 ? "doubleBitsToInt64(%s)" : "doubleBitsToUint64(%s)", x);
    else if (to == KIR_F64)
        sb_printf(b, from == KIR_I64 ? "int64BitsToDouble(%s)" : "uint64BitsToDouble(%s)", x);
    else
        sb_printf(b, "%s(%s)", gtype(to), x);
}

static const char *binop_symbol(int op)
{
    switch (op) {
    case KIR_ADD: return "+";
    case KIR_SUB: return "-";
    case KIR_MUL: return "*";
    case KIR_DIV: return "/";
    case KIR_AND: return "&";
    case KIR_OR: return "|";
    case KIR_XOR: return "^";
    case KIR_LT: return "<";
    case KIR_LE: return "<=";
    case KIR_GT: return ">";
    case KIR_GE: return ">=";
    default: return "==";
    }
}

static int width(int t) { return t == KIR_U8 ? 8 : (t == KIR_I32 || t == KIR_U32) ? 32 : 64; }

/* The expression of instruction i, whose operands are v<a>, v<b>, v<c>. */
static void inst_expr(emitter *e, sb *b, int i)
{
    const kir_inst *in = inst(e, i);
    int t = in->type, ta = in->op > KIR_REDUCED ? ty(e, in->a) : t;
    const char *mask = t == KIR_U8 ? " & 0xffu" : "";
    char a[24], bb[24], c[24];
    snprintf(a, sizeof a, "v%d", in->a);
    snprintf(bb, sizeof bb, "v%d", in->b);
    snprintf(c, sizeof c, "v%d", in->c);
    switch (in->op) {
    case KIR_LOAD: {
        burnc_dtype_t dt = e->k->inputs[in->a].dtype;
        sb idx = {0};
        index_expr(e, &idx, false, in->a, e->k->rank);
        const char *ix = idx.oom ? "0" : idx.s;
        int ws = word_shift(e, dt);
        if (ws) {
            /* the element's bits within its 32-bit word (little-endian, as the host wrote them) */
            char raw[64];
            snprintf(raw, sizeof raw, "raw_in%d(%s)", in->a, ix);
            switch (dt) {
            case BURNC_DTYPE_F16: sb_printf(b, "h_widen(%s, 0)", raw); e->helpers |= H_NARROW; break;
            case BURNC_DTYPE_BF16: sb_printf(b, "uintBitsToFloat(%s << 16)", raw); break;
            case BURNC_DTYPE_BOOL: sb_printf(b, "(%s != 0u)", raw); break;
            default: sb_printf(b, "%s", raw); break;
            }
            free(idx.s);
            if (idx.oom)
                b->oom = true;
            break;
        }
        switch (dt) {
        case BURNC_DTYPE_F16: sb_printf(b, "h_widen(uint(in%d.v[%s]), 0)", in->a, ix); e->helpers |= H_NARROW; break;
        case BURNC_DTYPE_BF16: sb_printf(b, "uintBitsToFloat(uint(in%d.v[%s]) << 16)", in->a, ix); break;
        case BURNC_DTYPE_BOOL: sb_printf(b, "(in%d.v[%s] != uint8_t(0))", in->a, ix); break;
        case BURNC_DTYPE_U8: sb_printf(b, "uint(in%d.v[%s])", in->a, ix); break;
        default: sb_printf(b, "in%d.v[%s]", in->a, ix); break;
        }
        free(idx.s);
        if (idx.oom)
            b->oom = true;
        break;
    }
    case KIR_CONST: const_expr(e, b, t, in->imm); break;
    case KIR_ARG: {
        int w = e->scalar_base + 2 * in->a;
        switch (t) {
        case KIR_F32: sb_printf(b, "uintBitsToFloat(uint(A.w[%d]))", w + 1); break;
        case KIR_F64: sb_printf(b, "int64BitsToDouble(A.w[%d])", w); break;
        case KIR_BOOL: sb_printf(b, "(A.w[%d] != 0l)", w); break;
        case KIR_U8: sb_printf(b, "(uint(A.w[%d]) & 0xffu)", w); break;
        default: sb_printf(b, "%s(A.w[%d])", gtype(t), w); break;
        }
        break;
    }
    case KIR_INDEX: sb_printf(b, "p%d", in->a); break;
    case KIR_EXTENT: sb_printf(b, "A.w[%d]", 2 + in->a); break;
    case KIR_ROW_LEN: sb_printf(b, "A.w[1]"); break;
    case KIR_REDUCED: sb_printf(b, "red%d", in->a); break;
    case KIR_NEG:
        if (is_fp(t))
            sb_printf(b, "-%s", a);
        else
            sb_printf(b, "(%s(0) - %s)%s", gtype(t), a, mask);
        break;
    case KIR_ABS:
        if (is_fp(t))
            sb_printf(b, "abs(%s)", a);
        else if (is_signed(t))
            sb_printf(b, "(%s < %s(0) ? %s(0) - %s : %s)", a, gtype(t), gtype(t), a, a);
        else
            sb_printf(b, "%s", a);
        break;
    case KIR_SQRT:
        if (t == KIR_F32 && !e->opt.no_f64)
            sb_printf(b, "float(sqrt(double(%s)))", a); /* correctly rounded: see helper_fma_f32 */
        else
            sb_printf(b, "sqrt(%s)", a);
        break;
    case KIR_FLOOR: sb_printf(b, "floor(%s)", a); break;
    case KIR_CEIL: sb_printf(b, "ceil(%s)", a); break;
    case KIR_TRUNC: sb_printf(b, "trunc(%s)", a); break;
    case KIR_RINT:
        if (t == KIR_F64) {
            e->helpers |= H_RINT;
            sb_printf(b, "rint_f64(%s)", a);
        } else
            sb_printf(b, "roundEven(%s)", a);
        break;
    case KIR_NOT:
        if (t == KIR_BOOL)
            sb_printf(b, "!%s", a);
        else
            sb_printf(b, "(~%s)%s", a, mask);
        break;
    case KIR_CONVERT: convert_expr(e, b, t, ta, a); break;
    case KIR_BITCAST: bitcast_expr(b, t, ta, a); break;
    case KIR_ROUND:
        e->helpers |= H_NARROW;
        sb_printf(b, "h_widen(h_from_f32(%s, %d), %d)", a, in->imm.i == KIR_BF16, in->imm.i == KIR_BF16);
        break;
    case KIR_DIV:
    case KIR_REM:
        if (t == KIR_F32 && in->op == KIR_DIV && !e->opt.no_f64) {
            sb_printf(b, "float(double(%s) / double(%s))", a, bb);
        } else if (is_fp(t) && in->op == KIR_DIV) {
            sb_printf(b, "%s / %s", a, bb);
        } else if (is_fp(t)) {
            e->helpers |= H_FMOD;
            sb_printf(b, "fmod_%s(%s, %s)", t == KIR_F32 ? "f32" : "f64", a, bb);
        } else if (is_signed(t)) {
            e->helpers |= H_IDIV;
            sb_printf(b, "%s_%s(%s, %s)", in->op == KIR_DIV ? "fdiv" : "fmodi", t == KIR_I32 ? "i32" : "i64", a, bb);
        } else {
            sb_printf(b, "(%s == %s(0) ? %s(0) : %s %s %s)", bb, gtype(t), gtype(t), a, in->op == KIR_DIV ? "/" : "%",
                      bb);
        }
        break;
    case KIR_MULHI:
        e->helpers |= H_MULHI;
        sb_printf(b, "mulhi_%s(%s, %s)", t == KIR_U32 ? "u32" : "u64", a, bb);
        break;
    case KIR_ADD:
    case KIR_SUB:
    case KIR_MUL:
        sb_printf(b, "(%s %s %s)%s", a, binop_symbol(in->op), bb, mask);
        break;
    case KIR_AND:
    case KIR_OR:
    case KIR_XOR:
        if (t == KIR_BOOL)
            sb_printf(b, "(%s %s %s)", a, in->op == KIR_AND ? "&&" : in->op == KIR_OR ? "||" : "!=", bb);
        else
            sb_printf(b, "(%s %s %s)", a, binop_symbol(in->op), bb);
        break;
    case KIR_SHL:
    case KIR_SHR:
        sb_printf(b, "(%s %s int(%s & %s(%d)))%s", a, in->op == KIR_SHL ? "<<" : ">>", bb, gtype(t), width(t) - 1,
                  in->op == KIR_SHL ? mask : "");
        break;
    case KIR_EQ:
    case KIR_LT:
    case KIR_LE:
    case KIR_GT:
    case KIR_GE:
        if (ta == KIR_BOOL)
            sb_printf(b, "(int(%s) %s int(%s))", a, binop_symbol(in->op), bb);
        else
            sb_printf(b, "(%s %s %s)", a, binop_symbol(in->op), bb);
        break;
    case KIR_NE: sb_printf(b, "(!(%s == %s))", a, bb); break; /* true with a NaN */
    case KIR_FMA:
        e->helpers |= H_FMA;
        sb_printf(b, "fma_%s(%s, %s, %s)", t == KIR_F32 ? "f32" : "f64", a, bb, c);
        break;
    case KIR_SELECT: sb_printf(b, "(%s ? %s : %s)", a, bb, c); break;
    default: sb_printf(b, "0 /* opcode %d */", in->op); break;
    }
}

/* The instructions the roots need, in order (as kernel_eval's plans). */
static int make_plan(const kir_kernel *k, uint8_t *need, int32_t *list)
{
    for (int i = k->n_insts - 1; i >= 0; i--) {
        if (!need[i])
            continue;
        const kir_inst *in = &k->insts[i];
        int n_ops = kir_n_operands(in->op);
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < n_ops; j++)
            need[ops[j]] = 1;
    }
    int n = 0;
    for (int i = 0; i < k->n_insts; i++)
        if (need[i])
            list[n++] = i;
    return n;
}

/* Declares v<i> for every instruction the roots need. */
static void emit_values(emitter *e, uint8_t *need, int32_t *list, const char *indent)
{
    int n = make_plan(e->k, need, list);
    for (int j = 0; j < n; j++) {
        int i = list[j];
        int t = ty(e, i);
        if (t == KIR_F64)
            e->uses_f64 = true;
        sb_printf(&e->body, "%s%s%s v%d = ", indent, is_fp(t) ? "precise " : "", gtype(t), i);
        inst_expr(e, &e->body, i);
        sb_printf(&e->body, ";\n");
    }
}

static void emit_store(emitter *e, const kir_store *st, const char *indent)
{
    const kir_kernel *k = e->k;
    burnc_dtype_t dt = k->outputs[st->slot].dtype;
    int t = ty(e, st->value);
    sb *b = &e->body;
    if (word_shift(e, dt)) {
        /* a part of a 32-bit word: st_out<slot> (emit_head) */
        sb_printf(b, "%sst_out%d(", indent, st->slot);
        index_expr(e, b, true, st->slot, st->row ? k->n_outer : k->rank);
        int fmt = dt == BURNC_DTYPE_BF16;
        if (dt == BURNC_DTYPE_BOOL)
            sb_printf(b, ", v%d ? 1u : 0u);\n", st->value);
        else if (dt == BURNC_DTYPE_U8)
            sb_printf(b, ", uint(v%d));\n", st->value);
        else if (t == KIR_F32)
            sb_printf(b, ", h_from_f32(v%d, %d));\n", st->value, fmt);
        else if (t == KIR_F64)
            sb_printf(b, ", h_from_f64(v%d, %d));\n", st->value, fmt);
        else if (t == KIR_U64)
            sb_printf(b, ", h_from_int(false, v%d, %d));\n", st->value, fmt);
        else if (t == KIR_BOOL)
            sb_printf(b, ", h_from_int(false, uint64_t(v%d ? 1 : 0), %d));\n", st->value, fmt);
        else
            sb_printf(b, ", h_from_int(int64_t(v%d) < 0l, uint64_t(abs(int64_t(v%d))), %d));\n", st->value,
                      st->value, fmt);
        if (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16)
            e->helpers |= H_NARROW;
        return;
    }
    sb_printf(b, "%sout%d.v[", indent, st->slot);
    index_expr(e, b, true, st->slot, st->row ? k->n_outer : k->rank);
    sb_printf(b, "] = ");
    if (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) {
        e->helpers |= H_NARROW;
        int fmt = dt == BURNC_DTYPE_BF16;
        if (t == KIR_F32)
            sb_printf(b, "uint16_t(h_from_f32(v%d, %d))", st->value, fmt);
        else if (t == KIR_F64)
            sb_printf(b, "uint16_t(h_from_f64(v%d, %d))", st->value, fmt);
        else if (t == KIR_U64)
            sb_printf(b, "uint16_t(h_from_int(false, v%d, %d))", st->value, fmt);
        else if (t == KIR_BOOL)
            sb_printf(b, "uint16_t(h_from_int(false, uint64_t(v%d ? 1 : 0), %d))", st->value, fmt);
        else
            sb_printf(b, "uint16_t(h_from_int(int64_t(v%d) < 0l, uint64_t(abs(int64_t(v%d))), %d))", st->value,
                      st->value, fmt);
    } else if (dt == BURNC_DTYPE_BOOL) {
        sb_printf(b, "uint8_t(v%d ? 1 : 0)", st->value);
    } else {
        sb_printf(b, "%s(v%d)", mem_type(dt), st->value);
    }
    sb_printf(b, ";\n");
}

static void emit_stores(emitter *e, bool row, uint8_t *need, int32_t *list, const char *indent)
{
    const kir_kernel *k = e->k;
    memset(need, 0, (size_t)k->n_insts);
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row == row)
            need[k->stores[s].value] = 1;
    emit_values(e, need, list, indent);
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row == row)
            emit_store(e, &k->stores[s], indent);
}

/* Decomposes `var` (row-major) into p<from>..p<to-1>. var is below the product of the extents,
 * so the first axis takes what is left without a division. Below 2^32 (every launch but those
 * of options.wide) the divisions are 32-bit ones by the extents' divisor words: a multiply-high
 * and shifts, where a division by a value unknown to the compiler is a long sequence on GPUs.
 * The wide shader divides in 64 bits; it is a shader of its own, because a 64-bit division in
 * a branch never taken still costs NVIDIA's compiled shader registers. */
static void emit_positions(emitter *e, const char *var, int from, int to, const char *indent)
{
    sb *b = &e->body;
    if (to <= from)
        return;
    if (to - from == 1) {
        sb_printf(b, "%sp%d = %s;\n", indent, from, var);
        return;
    }
    if (e->opt.wide) {
        sb_printf(b, "%s{\n%s  int64_t q = %s;\n", indent, indent, var);
        for (int d = to - 1; d > from; d--)
            sb_printf(b, "%s  p%d = q %% A.w[%d]; q /= A.w[%d];\n", indent, d, 2 + d, 2 + d);
        sb_printf(b, "%s  p%d = q;\n%s}\n", indent, from, indent);
        return;
    }
    e->helpers |= H_UDIV;
    sb_printf(b, "%s{\n%s  uint q = uint(%s), x;\n", indent, indent, var);
    for (int d = to - 1; d > from; d--)
        sb_printf(b, "%s  x = udiv(q, A.w[%d]); p%d = int64_t(q - x * uint(A.w[%d])); q = x;\n", indent,
                  2 + e->k->rank + d, d, 2 + d);
    sb_printf(b, "%s  p%d = int64_t(q);\n%s}\n", indent, from, indent);
}

/* ---- Element-wise kernels ---- */

static void emit_elementwise(emitter *e, uint8_t *need, int32_t *list)
{
    const kir_kernel *k = e->k;
    sb *b = &e->body;
    sb_printf(b, "void main() {\n"
                 "  int64_t grp = int64_t(gl_WorkGroupID.x) + int64_t(gl_WorkGroupID.y) * int64_t(gl_NumWorkGroups.x);\n"
                 "  int64_t first = grp * %dl + int64_t(gl_LocalInvocationID.x);\n",
              e->opt.wg_size * e->opt.items);
    /* the bound once, not an exit per position: the loop has no early return, so the compiler
     * may issue every load before the stores (restrict) */
    sb_printf(b, "  int n_it = int(clamp((A.w[0] - first + %dl) / %dl, 0l, %dl));\n"
                 "  for (int it = 0; it < n_it; it++) {\n"
                 "    int64_t at = first + int64_t(it * %d);\n",
              e->opt.wg_size - 1, e->opt.wg_size, e->opt.items, e->opt.wg_size);
    for (int d = 0; d < k->rank; d++)
        sb_printf(b, "    int64_t p%d;\n", d);
    emit_positions(e, "at", 0, k->rank, "    ");
    emit_stores(e, false, need, list, "    ");
    sb_printf(b, "  }\n");
    sb_printf(b, "}\n");
}

/* The loop of stage s over a lane's positions of one leaf, from `start` below jend in steps of
 * 32 (kernel.h: each lane combines its positions in increasing order). One copy of the body:
 * lavapipe's and the drivers' compile time grows with the shader. */
static void emit_lane_loop(emitter *e, int s, const char *start, const char *indent, uint8_t *need, int32_t *list)
{
    const kir_kernel *k = e->k;
    sb *b = &e->body;
    char in2[32];
    snprintf(in2, sizeof in2, "%s  ", indent);
    sb_printf(b, "%sfor (int64_t j = %s; j < jend; j += 32l) {\n", indent, start);
    emit_positions(e, "j", k->n_outer, k->rank, in2);
    memset(need, 0, (size_t)k->n_insts);
    need[k->stages[s].value] = 1;
    emit_values(e, need, list, in2);
    sb_printf(b, "%scomb%d(av, ap, v%d, j);\n%s}\n", in2, s, k->stages[s].value, indent);
}

/* ---- Reductions ---- */

#define KIR_LEAF_STR "4096" /* KIR_LEAF in GLSL text (checked below) */
_Static_assert(KIR_LEAF == 4096, "KIR_LEAF_STR must spell KIR_LEAF");

/* The combiner of stage s as GLSL functions over (value, position) pairs. */
static void emit_combiner(emitter *e, sb *b, int s)
{
    const kir_kernel *k = e->k;
    int comb = k->stages[s].combiner, t = ty(e, k->stages[s].value);
    const char *T = gtype(t);
    bool fp = is_fp(t), max = comb == KIR_COMBINE_MAX || comb == KIR_COMBINE_ARGMAX;
    const char *nan = t == KIR_F32 ? "isnan_f32" : "isnan_f64";
    if (fp)
        e->helpers |= H_ISNAN;
    /* identity */
    sb_printf(b, "%s ident%d() { ", T, s);
    if (comb == KIR_COMBINE_SUM || comb == KIR_COMBINE_PROD) {
        sb_printf(b, "return %s(%d); }\n", T, comb == KIR_COMBINE_PROD);
    } else if (fp) {
        sb_printf(b, "return %s(%s); }\n", T, max ? "uintBitsToFloat(0xff800000u)" : "uintBitsToFloat(0x7f800000u)");
    } else {
        const char *lo = "0", *hi = "0";
        switch (t) {
        case KIR_BOOL: lo = "false"; hi = "true"; break;
        case KIR_U8: hi = "255u"; lo = "0u"; break;
        case KIR_U32: hi = "0xffffffffu"; lo = "0u"; break;
        case KIR_I32: hi = "0x7fffffff"; lo = "int(0x80000000u)"; break;
        case KIR_I64: hi = "int64_t(0x7ffffffffffffffful)"; lo = "int64_t(0x8000000000000000ul)"; break;
        default: hi = "0xfffffffffffffffful"; lo = "0ul"; break;
        }
        sb_printf(b, "return %s; }\n", max ? lo : hi);
    }
    /* combine: l (lower lanes or leaves) with r, the result in l */
    sb_printf(b, "void comb%d(inout %s lv, inout int64_t lp, %s rv, int64_t rp) {\n", s, T, T);
    const char *cmp_l = t == KIR_BOOL ? "int(lv)" : "lv", *cmp_r = t == KIR_BOOL ? "int(rv)" : "rv";
    switch (comb) {
    case KIR_COMBINE_SUM:
    case KIR_COMBINE_PROD:
        sb_printf(b, "  %s%s x = (lv %s rv)%s; lv = x;\n", fp ? "precise " : "", T, comb == KIR_COMBINE_SUM ? "+" : "*",
                  t == KIR_U8 ? " & 0xffu" : "");
        break;
    case KIR_COMBINE_MAX:
    case KIR_COMBINE_MIN:
        if (fp)
            sb_printf(b, "  if (!((lv %s rv) || %s(lv))) lv = rv;\n", max ? ">" : "<", nan);
        else
            sb_printf(b, "  if (!(%s %s %s)) lv = rv;\n", cmp_l, max ? ">" : "<", cmp_r);
        break;
    default:
        if (fp)
            sb_printf(b, "  bool better; bool nl = %s(lv), nr = %s(rv);\n"
                         "  if (nl || nr) better = nr && (!nl || rp < lp);\n"
                         "  else if (!(lv == rv)) better = rv %s lv;\n"
                         "  else better = rp < lp;\n", nan, nan, max ? ">" : "<");
        else
            sb_printf(b, "  bool better = %s == %s ? rp < lp : %s %s %s;\n", cmp_l, cmp_r, cmp_r, max ? ">" : "<", cmp_l);
        sb_printf(b, "  if (better) { lv = rv; lp = rp; }\n");
        break;
    }
    sb_printf(b, "}\n");
    /* the pairwise tree over n values of a local array (odd last carried up) */
    int W = e->opt.wg_size / 32 > 32 ? e->opt.wg_size / 32 : 32;
    sb_printf(b, "void tree%d(inout %s tv[%d], inout int64_t tp[%d], int n) {\n"
                 "  while (n > 1) {\n"
                 "    int m = 0;\n"
                 "    for (int i = 0; i + 1 < n; i += 2) { %s lv = tv[i]; int64_t lp = tp[i]; comb%d(lv, lp, tv[i + 1], tp[i + 1]); tv[m] = lv; tp[m] = lp; m++; }\n"
                 "    if ((n & 1) != 0) { tv[m] = tv[n - 1]; tp[m] = tp[n - 1]; m++; }\n"
                 "    n = m;\n"
                 "  }\n"
                 "}\n",
              s, T, W, W, T, s);
    if (!e->opt.subgroups)
        return;
    /* the pairwise tree's levels within a subgroup: after level `off`, lane l (l % 2off == 0)
     * holds the tree of lanes l..l+2off-1; every lane takes part in every shuffle */
    char rv[96];
    if (t == KIR_I64 || t == KIR_U64)
        snprintf(rv, sizeof rv, "%s(pack64(subgroupShuffleDown(unpack32(uint64_t(av)), off)))", T);
    else
        snprintf(rv, sizeof rv, "subgroupShuffleDown(av, off)");
    sb_printf(b, "void lanes%d(inout %s av, inout int64_t ap, uint lane) {\n"
                 "  for (uint off = 1u; off < min(gl_SubgroupSize, 32u); off *= 2u) {\n"
                 "    %s rv = %s;\n"
                 "    int64_t rp = int64_t(pack64(subgroupShuffleDown(unpack32(uint64_t(ap)), off)));\n"
                 "    if ((lane & (2u * off - 1u)) == 0u) comb%d(av, ap, rv, rp);\n"
                 "  }\n"
                 "}\n",
              s, T, T, rv, s);
}

/* The lanes of a leaf (values av, ap of every invocation) combined into invocation `lane == 0`'s
 * tv[0], tp[0] (its warp's 32 shared slots from tid on): through subgroups, the levels past
 * the subgroup's size from shared memory; without, the whole tree from shared memory. The
 * caller guards the gather with `cond` and closes the block after using tv[0]. */
static void emit_lane_tree(emitter *e, int s, const char *cond, const char *indent)
{
    sb *b = &e->body;
    int W = e->opt.wg_size / 32 > 32 ? e->opt.wg_size / 32 : 32;
    const char *T = gtype(ty(e, e->k->stages[s].value));
    if (e->opt.subgroups)
        sb_printf(b, "%slanes%d(av, ap, lane);\n", indent, s);
    sb_printf(b, "%ssh_v%d[tid] = av; sh_p%d[tid] = ap;\n"
                 "%sbarrier();\n"
                 "%sif (%s) {\n"
                 "%s  %s tv[%d]; int64_t tp[%d];\n",
              indent, s, s, indent, indent, cond, indent, T, W, W);
    if (e->opt.subgroups)
        sb_printf(b, "%s  uint g = min(gl_SubgroupSize, 32u); int n = int(32u / g);\n"
                     "%s  for (int i = 0; i < n; i++) { tv[i] = sh_v%d[tid + uint(i) * g]; tp[i] = sh_p%d[tid + uint(i) * g]; }\n"
                     "%s  tree%d(tv, tp, n);\n",
                  indent, indent, s, s, indent, s);
    else
        sb_printf(b, "%s  for (int i = 0; i < 32; i++) { tv[i] = sh_v%d[tid + uint(i)]; tp[i] = sh_p%d[tid + uint(i)]; }\n"
                     "%s  tree%d(tv, tp, 32);\n",
                  indent, s, s, indent, s);
}

/* One stage of one row: warps of 32 lanes take aligned blocks of `blk` leaves each (kernel.h:
 * such splits keep the order); lane partials meet in shared memory, lane 0 of a warp folds a
 * leaf's lanes with the pairwise tree and its leaves with a stack that merges equal-sized
 * blocks (the same tree), and invocation 0 combines the warps' blocks with the tree. */
static void emit_stage(emitter *e, int s, uint8_t *need, int32_t *list)
{
    const kir_kernel *k = e->k;
    sb *b = &e->body;
    int t = ty(e, k->stages[s].value);
    const char *T = gtype(t);
    int W = e->opt.wg_size / 32 > 32 ? e->opt.wg_size / 32 : 32;
    sb_printf(b, "    {\n"
                 "      %s stk_v[48]; int64_t stk_p[48]; int64_t stk_n[48]; int sp = 0;\n"
                 "      for (int64_t t = 0; t < blk; t++) {\n"
                 "        int64_t leaf = int64_t(warp) * blk + t;\n"
                 "        %s av = ident%d(); int64_t ap = int64_t(0x7ffffffffffffffful);\n"
                 "        if (leaf < n_leaves) {\n"
                 "          int64_t jend = min((leaf + 1l) * %dl, A.w[1]);\n",
              T, T, s, KIR_LEAF);
    emit_lane_loop(e, s, "leaf * " KIR_LEAF_STR "l + int64_t(lane)", "          ", need, list);
    sb_printf(b, "        }\n");
    emit_lane_tree(e, s, "lane == 0u && leaf < n_leaves", "        ");
    sb_printf(b, "          stk_v[sp] = tv[0]; stk_p[sp] = tp[0]; stk_n[sp] = 1l; sp++;\n"
                 "          while (sp > 1 && stk_n[sp - 1] == stk_n[sp - 2]) {\n"
                 "            %s lv = stk_v[sp - 2]; int64_t lp = stk_p[sp - 2];\n"
                 "            comb%d(lv, lp, stk_v[sp - 1], stk_p[sp - 1]);\n"
                 "            stk_v[sp - 2] = lv; stk_p[sp - 2] = lp; stk_n[sp - 2] *= 2l; sp--;\n"
                 "          }\n"
                 "        }\n"
                 "        barrier();\n"
                 "      }\n"
                 "      if (lane == 0u && sp > 0) {\n"
                 "        %s rv = stk_v[sp - 1]; int64_t rp = stk_p[sp - 1];\n"
                 "        for (int i = sp - 2; i >= 0; i--) { %s lv = stk_v[i]; int64_t lp = stk_p[i]; comb%d(lv, lp, rv, rp); rv = lv; rp = lp; }\n"
                 "        sh_v%d[tid] = rv; sh_p%d[tid] = rp;\n"
                 "      }\n"
                 "      barrier();\n"
                 "      if (tid == 0u) {\n"
                 "        %s tv[%d]; int64_t tp[%d];\n"
                 "        int nb = int((n_leaves + blk - 1) / blk);\n"
                 "        for (int i = 0; i < nb; i++) { tv[i] = sh_v%d[uint(i) * 32u]; tp[i] = sh_p%d[uint(i) * 32u]; }\n"
                 "        if (nb == 0) { tv[0] = ident%d(); tp[0] = int64_t(0x7ffffffffffffffful); }\n"
                 "        tree%d(tv, tp, nb);\n"
                 "        sh_v%d[0] = tv[0]; sh_p%d[0] = tp[0];\n"
                 "      }\n"
                 "      barrier();\n",
              T, s, T, T, s, s, s, T, W, W, s, s, s, s, s, s);
    int comb = k->stages[s].combiner;
    if (comb == KIR_COMBINE_ARGMAX || comb == KIR_COMBINE_ARGMIN)
        sb_printf(b, "      red%d = sh_p%d[0] == int64_t(0x7ffffffffffffffful) ? 0l : sh_p%d[0];\n", s, s, s);
    else
        sb_printf(b, "      red%d = sh_v%d[0];\n", s, s);
    sb_printf(b, "      barrier();\n    }\n");
}

bool cg_glsl_multipass(const kir_kernel *k)
{
    if (elementwise(k) || k->n_stages != 1)
        return false;
    for (int s = 0; s < k->n_stores; s++)
        if (!k->stores[s].row)
            return false;
    return true;
}

/* The passes of a multi-pass reduction (glsl.h), selected by the pass word: each a straight
 * run of main that returns. Leaves: warp w of the dispatch reduces leaf w of the whole launch
 * (row-major over rows and leaves) as emit_stage does one leaf; tree: invocation i folds the
 * (up to) 32 records of chunk i with the pairwise tree, which keeps kernel.h's order since the
 * chunks are aligned; finish: invocation r takes row r's last record as the stage result and
 * runs the row stores. */
static void emit_passes(emitter *e, uint8_t *need, int32_t *list)
{
    const kir_kernel *k = e->k;
    sb *b = &e->body;
    int mp = e->scalar_base + 2 * k->n_scalars, warps = e->opt.wg_size / 32;
    int t = ty(e, k->stages[0].value);
    const char *T = gtype(t);
    int W = warps > 32 ? warps : 32;
    int comb = k->stages[0].combiner;
    bool arg = comb == KIR_COMBINE_ARGMAX || comb == KIR_COMBINE_ARGMIN;
    sb_printf(b, "  int64_t grp = int64_t(gl_WorkGroupID.x) + int64_t(gl_WorkGroupID.y) * int64_t(gl_NumWorkGroups.x);\n"
                 "  if (A.w[%d] == %dl) {\n"
                 "    int64_t unit = grp * %dl + int64_t(warp), nl = A.w[%d];\n"
                 "    bool live = unit < A.w[0] * nl;\n"
                 "    %s av = ident0(); int64_t ap = int64_t(0x7ffffffffffffffful);\n"
                 "    if (live) {\n"
                 "      int64_t row = unit / nl, leaf = unit - row * nl;\n",
              mp, CG_GLSL_PASS_LEAVES, warps, mp + 1, T);
    emit_positions(e, "row", 0, k->n_outer, "      ");
    sb_printf(b, "      int64_t jend = min((leaf + 1l) * %dl, A.w[1]);\n", KIR_LEAF);
    emit_lane_loop(e, 0, "leaf * " KIR_LEAF_STR "l + int64_t(lane)", "      ", need, list);
    sb_printf(b, "    }\n");
    emit_lane_tree(e, 0, "live && lane == 0u", "    ");
    sb_printf(b, "      scr.r[uint(A.w[%d] + unit)] = Rec(tv[0], tp[0]);\n"
                 "    }\n"
                 "    return;\n"
                 "  }\n",
              mp + 3);
    sb_printf(b, "  if (A.w[%d] == %dl) {\n"
                 "    int64_t i = grp * %dl + int64_t(tid), m = A.w[%d], m2 = (m + 31l) / 32l;\n"
                 "    if (i < A.w[0] * m2) {\n"
                 "      int64_t row = i / m2, c = i - row * m2, at = A.w[%d] + row * m + c * 32l;\n"
                 "      int n = int(min(32l, m - c * 32l));\n"
                 "      %s tv[%d]; int64_t tp[%d];\n"
                 "      for (int x = 0; x < n; x++) { Rec r = scr.r[uint(at + int64_t(x))]; tv[x] = r.v; tp[x] = r.p; }\n"
                 "      tree0(tv, tp, n);\n"
                 "      scr.r[uint(A.w[%d] + i)] = Rec(tv[0], tp[0]);\n"
                 "    }\n"
                 "    return;\n"
                 "  }\n",
              mp, CG_GLSL_PASS_TREE, e->opt.wg_size, mp + 1, mp + 2, T, W, W, mp + 3);
    sb_printf(b, "  if (A.w[%d] == %dl) {\n"
                 "    int64_t row = grp * %dl + int64_t(tid);\n"
                 "    if (row >= A.w[0]) return;\n",
              mp, CG_GLSL_PASS_FINISH, e->opt.wg_size);
    emit_positions(e, "row", 0, k->n_outer, "    ");
    for (int d = k->n_outer; d < k->rank; d++)
        sb_printf(b, "    p%d = 0;\n", d);
    sb_printf(b, "    Rec r = scr.r[uint(A.w[%d] + row)];\n", mp + 2);
    if (arg)
        sb_printf(b, "    int64_t red0 = r.p == int64_t(0x7ffffffffffffffful) ? 0l : r.p;\n");
    else
        sb_printf(b, "    %s red0 = r.v;\n", T);
    emit_stores(e, true, need, list, "    ");
    sb_printf(b, "    return;\n  }\n");
}

static void emit_rows(emitter *e, uint8_t *need, int32_t *list)
{
    const kir_kernel *k = e->k;
    sb *b = &e->body;
    int warps = e->opt.wg_size / 32;
    bool passes = e->opt.passes && cg_glsl_multipass(k);
    for (int s = 0; s < k->n_stages; s++) {
        int t = ty(e, k->stages[s].value);
        sb_printf(b, "shared %s sh_v%d[%d];\nshared int64_t sh_p%d[%d];\n", gtype(t), s, e->opt.wg_size, s,
                  e->opt.wg_size);
        emit_combiner(e, b, s);
    }
    if (passes)
        sb_printf(b, "struct Rec { %s v; int64_t p; };\n"
                     "layout(std430, set = 0, binding = %d) buffer Scratch { Rec r[]; } scr;\n",
                  gtype(ty(e, k->stages[0].value)), 1 + k->n_inputs + k->n_outputs);
    /* with subgroups, invocations are numbered subgroup by subgroup, so that a warp's lanes
     * are whole subgroups (or a part of one) in order */
    sb_printf(b, "void main() {\n"
                 "  uint tid = %s, lane = tid %% 32u, warp = tid / 32u;\n",
              e->opt.subgroups ? "gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID" : "gl_LocalInvocationID.x");
    if (passes) {
        for (int d = 0; d < k->rank; d++)
            sb_printf(b, "  int64_t p%d = 0;\n", d);
        emit_passes(e, need, list);
        sb_printf(b, "}\n");
        return;
    }
    sb_printf(b, "  int64_t n_leaves = (A.w[1] + %dl) / %dl;\n"
                 "  int64_t per = (n_leaves + %dl) / %dl, blk = 1;\n"
                 "  while (blk < per) blk *= 2l;\n"
                 "  for (int64_t row = int64_t(gl_WorkGroupID.x); row < A.w[0]; row += int64_t(gl_NumWorkGroups.x)) {\n",
              KIR_LEAF - 1, KIR_LEAF, warps - 1, warps);
    for (int d = 0; d < k->rank; d++)
        sb_printf(b, "    int64_t p%d = 0;\n", d);
    emit_positions(e, "row", 0, k->n_outer, "    ");
    for (int s = 0; s < k->n_stages; s++) {
        int comb = k->stages[s].combiner;
        int t = comb == KIR_COMBINE_ARGMAX || comb == KIR_COMBINE_ARGMIN ? KIR_I64 : ty(e, k->stages[s].value);
        sb_printf(b, "    %s red%d;\n", gtype(t), s);
    }
    for (int s = 0; s < k->n_stages; s++)
        emit_stage(e, s, need, list);
    bool has_elem = false, has_row = false;
    for (int s = 0; s < k->n_stores; s++)
        *(k->stores[s].row ? &has_row : &has_elem) = true;
    if (has_elem) {
        sb_printf(b, "    for (int64_t j = int64_t(tid); j < A.w[1]; j += %dl) {\n", e->opt.wg_size);
        emit_positions(e, "j", k->n_outer, k->rank, "      ");
        emit_stores(e, false, need, list, "      ");
        sb_printf(b, "    }\n");
    }
    if (has_row) {
        sb_printf(b, "    if (tid == 0u) {\n");
        for (int d = k->n_outer; d < k->rank; d++)
            sb_printf(b, "      p%d = 0;\n", d);
        emit_stores(e, true, need, list, "      ");
        sb_printf(b, "    }\n");
    }
    sb_printf(b, "    barrier();\n  }\n}\n");
}

/* ---- Helpers ---- */

static const char helper_isnan[] =
    "bool isnan_f32(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }\n";
static const char helper_isnan_f64[] =
    "bool isnan_f64(double x) { return (doubleBitsToUint64(x) & 0x7ffffffffffffffful) > 0x7ff0000000000000ul; }\n";

/* f16 (fmt 0: 10 mantissa bits, bias 15) and bf16 (fmt 1: 7, 127), rounded once to nearest
 * even from sig * 2^e2, as ir/dtype.c does; NaNs keep their top payload bits, quieted. */
static const char helper_narrow[] =
    "int msb64(uint64_t x) { uint hi = uint(x >> 32); return hi != 0u ? 32 + findMSB(hi) : findMSB(uint(x)); }\n"
    "uint h_round(bool neg, uint64_t sig, int e2, int fmt) {\n"
    "  int mant = fmt == 0 ? 10 : 7, bias = fmt == 0 ? 15 : 127;\n"
    "  uint inf = fmt == 0 ? 0x7c00u : 0x7f80u, sign = neg ? (fmt == 0 ? 0x8000u : 0x8000u) : 0u;\n"
    "  if (sig == 0ul) return sign;\n"
    "  int e = msb64(sig) + e2, emin = 1 - bias, eq = max(e, emin), shift = (eq - mant) - e2;\n"
    "  uint64_t n;\n"
    "  if (shift <= 0) n = sig << (-shift);\n"
    "  else if (shift >= 64) n = 0ul;\n"
    "  else {\n"
    "    uint64_t rem = sig & ((1ul << shift) - 1ul), hlf = 1ul << (shift - 1);\n"
    "    n = sig >> shift;\n"
    "    if (rem > hlf || (rem == hlf && (n & 1ul) != 0ul)) n++;\n"
    "  }\n"
    "  uint64_t bits = (uint64_t(eq + bias - 1) << mant) + n;\n"
    "  if (bits >= uint64_t(inf)) return sign | inf;\n"
    "  return sign | uint(bits);\n"
    "}\n"
    "uint h_from_f32(float x, int fmt) {\n"
    "  uint u = floatBitsToUint(x), e = (u >> 23) & 0xffu, m = u & 0x7fffffu;\n"
    "  bool neg = (u >> 31) != 0u;\n"
    "  uint inf = fmt == 0 ? 0x7c00u : 0x7f80u, sign = neg ? 0x8000u : 0u;\n"
    "  if (e == 0xffu) {\n"
    "    if (m == 0u) return sign | inf;\n"
    "    return sign | inf | (m >> (fmt == 0 ? 13 : 16)) | (fmt == 0 ? 0x200u : 0x40u);\n"
    "  }\n"
    "  if (e == 0u) return h_round(neg, uint64_t(m), -149, fmt);\n"
    "  return h_round(neg, uint64_t(m | 0x800000u), int(e) - 150, fmt);\n"
    "}\n"
    "uint h_from_int(bool neg, uint64_t mag, int fmt) { return h_round(neg, mag, 0, fmt); }\n"
    "float h_widen(uint h, int fmt) {\n"
    "  if (fmt == 1) return uintBitsToFloat(h << 16);\n"
    "  uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "  if (e == 0x1fu) return uintBitsToFloat(s | 0x7f800000u | (m << 13));\n"
    "  if (e == 0u) { precise float v = float(m) * uintBitsToFloat(0x33800000u); return uintBitsToFloat(floatBitsToUint(v) | s); }\n"
    "  return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));\n"
    "}\n";

static const char helper_narrow_f64[] =
    "uint h_from_f64(double x, int fmt) {\n"
    "  uint64_t u = doubleBitsToUint64(x), frac = u & 0xffffffffffffful;\n"
    "  int ef = int((u >> 52) & 0x7fful);\n"
    "  bool neg = (u >> 63) != 0ul;\n"
    "  uint inf = fmt == 0 ? 0x7c00u : 0x7f80u, sign = neg ? 0x8000u : 0u;\n"
    "  if (ef == 0x7ff) {\n"
    "    if (frac == 0ul) return sign | inf;\n"
    "    return sign | inf | uint(frac >> (fmt == 0 ? 42 : 45)) | (fmt == 0 ? 0x200u : 0x40u);\n"
    "  }\n"
    "  if (ef == 0) return sign;\n"
    "  return h_round(neg, frac | (1ul << 52), ef - 1075, fmt);\n"
    "}\n";

static const char helper_idiv[] =
    "int fdiv_i32(int a, int b) { if (b == 0) return 0; if (b == -1) return 0 - a; int q = a / b, r = a - q * b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q; }\n"
    "int fmodi_i32(int a, int b) { if (b == 0 || b == -1) return 0; int r = a - (a / b) * b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }\n"
    "int64_t fdiv_i64(int64_t a, int64_t b) { if (b == 0l) return 0l; if (b == -1l) return 0l - a; int64_t q = a / b, r = a - q * b;\n"
    "  return (r != 0l && ((r < 0l) != (b < 0l))) ? q - 1l : q; }\n"
    "int64_t fmodi_i64(int64_t a, int64_t b) { if (b == 0l || b == -1l) return 0l; int64_t r = a - (a / b) * b;\n"
    "  return (r != 0l && ((r < 0l) != (b < 0l))) ? r + b : r; }\n";

/* n / d for d's divisor word g (cg_glsl_divisor): m in the low 32 bits, 2 s2 + s1 above. */
static const char helper_udiv[] =
    "uint udiv(uint n, int64_t g) {\n"
    "  uint t, lo, s = uint(g >> 32);\n"
    "  umulExtended(n, uint(g), t, lo);\n"
    "  return (t + ((n - t) >> (s & 1u))) >> (s >> 1);\n"
    "}\n";

static const char helper_mulhi[] =
    "uint mulhi_u32(uint a, uint b) { uint hi, lo; umulExtended(a, b, hi, lo); return hi; }\n"
    "uint64_t mulhi_u64(uint64_t a, uint64_t b) {\n"
    "  uint64_t al = a & 0xfffffffful, ah = a >> 32, bl = b & 0xfffffffful, bh = b >> 32;\n"
    "  uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;\n"
    "  uint64_t mid = (ll >> 32) + (lh & 0xfffffffful) + (hl & 0xfffffffful);\n"
    "  return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);\n"
    "}\n";

/* C's fmod, exactly, on the integer significands (no float operation, so a device that
 * flushes denormals still gets them right), the result with the dividend's sign. */
static const char helper_fmod_f32[] =
    "float fmod_f32(float x, float y) {\n"
    "  uint ux = floatBitsToUint(x), uy = floatBitsToUint(y), sx = ux & 0x80000000u;\n"
    "  ux &= 0x7fffffffu; uy &= 0x7fffffffu;\n"
    "  if (ux >= 0x7f800000u || uy > 0x7f800000u || uy == 0u) return uintBitsToFloat(0x7fc00000u);\n"
    "  if (uy == 0x7f800000u || ux < uy) return x;\n"
    "  int ex = int(ux >> 23), ey = int(uy >> 23);\n"
    "  uint mx = ux & 0x7fffffu, my = uy & 0x7fffffu;\n"
    "  if (ex == 0) ex = 1; else mx |= 0x800000u;\n"
    "  if (ey == 0) ey = 1; else my |= 0x800000u;\n"
    "  while (ex > ey) { mx %= my; int sh = min(ex - ey, 7); mx <<= sh; ex -= sh; }\n"
    "  mx %= my;\n"
    "  if (mx == 0u) return uintBitsToFloat(sx);\n"
    "  while (mx < 0x800000u && ey > 1) { mx <<= 1; ey--; }\n"
    "  uint bits = mx < 0x800000u ? mx : ((uint(ey) << 23) | (mx & 0x7fffffu));\n"
    "  return uintBitsToFloat(bits | sx);\n"
    "}\n";

static const char helper_fmod_f64[] =
    "double fmod_f64(double x, double y) {\n"
    "  uint64_t ux = doubleBitsToUint64(x), uy = doubleBitsToUint64(y), sx = ux & 0x8000000000000000ul;\n"
    "  ux &= 0x7ffffffffffffffful; uy &= 0x7ffffffffffffffful;\n"
    "  if (ux >= 0x7ff0000000000000ul || uy > 0x7ff0000000000000ul || uy == 0ul) return uint64BitsToDouble(0x7ff8000000000000ul);\n"
    "  if (uy == 0x7ff0000000000000ul || ux < uy) return x;\n"
    "  int ex = int(ux >> 52), ey = int(uy >> 52);\n"
    "  uint64_t mx = ux & 0xffffffffffffful, my = uy & 0xffffffffffffful;\n"
    "  if (ex == 0) ex = 1; else mx |= 0x10000000000000ul;\n"
    "  if (ey == 0) ey = 1; else my |= 0x10000000000000ul;\n"
    "  while (ex > ey) { mx %= my; int sh = min(ex - ey, 10); mx <<= sh; ex -= sh; }\n"
    "  mx %= my;\n"
    "  if (mx == 0ul) return uint64BitsToDouble(sx);\n"
    "  while (mx < 0x10000000000000ul && ey > 1) { mx <<= 1; ey--; }\n"
    "  uint64_t bits = mx < 0x10000000000000ul ? mx : ((uint64_t(ey) << 52) | (mx & 0xffffffffffffful));\n"
    "  return uint64BitsToDouble(bits | sx);\n"
    "}\n";

/* f64 round half to even from floor, which is exact: lavapipe (Mesa 22.3) on a CPU without
 * AVX-512 rounds f64 halves toward zero in roundEven (1.5 -> 1, -3.5 -> -3), while its f32
 * roundEven and f64 floor are right. x - floor(x) is exact; a zero result takes x's sign. */
static const char helper_rint_f64[] =
    "double rint_f64(double x) {\n"
    "  precise double r = floor(x), d = x - r;\n"
    "  precise double h = r * 0.5;\n"
    "  bool odd = floor(h) != h;\n"
    "  precise double y = (d > 0.5 || (d == 0.5 && odd)) ? r + 1.0 : r;\n"
    "  return y == 0.0 ? x * 0.0 : y;\n"
    "}\n";

/* f32 division and square root go through f64 where the device has it: Vulkan lets f32 division
 * be off by 2.5 ulps and sqrt by more, but an f32 quotient or root is never within 2^-49 (relative)
 * of an f32 rounding boundary unless it lies on it, so an f64 result good to a few f64 ulps rounds
 * to the correctly rounded f32.
 *
 * fma rounded once, where the device's own may be a product and a sum (Vulkan allows that, and
 * lavapipe does it). f32: the product is exact in f64; the f64 sum is made round-to-odd from
 * its TwoSum error, so its rounding to f32 is the single correct one. f64: Dekker's exact
 * product, then the same round-to-odd on the low parts; outside the range where the split is
 * exact (huge, tiny, infinite or NaN operands) the device's fma. */
static const char native_fma_f32[] = "float fma_f32(float a, float b, float c) { return fma(a, b, c); }\n";
static const char native_fma_f64[] = "double fma_f64(double a, double b, double c) { return fma(a, b, c); }\n";

static const char helper_fma_f32[] =
    "float fma_f32(float a, float b, float c) {\n"
    "  precise double p = double(a) * double(b);\n"
    "  precise double s = p + double(c);\n"
    "  uint64_t u = doubleBitsToUint64(s);\n"
    "  if ((u & 0x7ff0000000000000ul) == 0x7ff0000000000000ul) return float(s);\n"
    "  precise double bv = s - p;\n"
    "  precise double err = (p - (s - bv)) + (double(c) - bv);\n"
    "  if (err != 0.0lf && (u & 1ul) == 0ul) u = ((err > 0.0lf) == (s > 0.0lf)) ? u + 1ul : u - 1ul;\n"
    "  return float(uint64BitsToDouble(u));\n"
    "}\n";

static const char helper_fma_f64[] =
    "double fma_f64(double a, double b, double c) {\n"
    "  uint64_t ea = (doubleBitsToUint64(a) >> 52) & 0x7fful, eb = (doubleBitsToUint64(b) >> 52) & 0x7fful;\n"
    "  uint64_t ec = (doubleBitsToUint64(c) >> 52) & 0x7fful;\n"
    "  if (ea < 600ul || ea > 1500ul || eb < 600ul || eb > 1500ul || ec > 2000ul) return fma(a, b, c);\n"
    "  precise double ta = 134217729.0lf * a, ah = ta - (ta - a), al = a - ah;\n"
    "  precise double tb = 134217729.0lf * b, bh = tb - (tb - b), bl = b - bh;\n"
    "  precise double uh = a * b;\n"
    "  precise double ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl;\n"
    "  precise double s = uh + c, bv = s - uh, t = (uh - (s - bv)) + (c - bv);\n"
    "  precise double v = t + ul, bw = v - t, w = (t - (v - bw)) + (ul - bw);\n"
    "  uint64_t u = doubleBitsToUint64(v);\n"
    "  if (w != 0.0lf && (u & 1ul) == 0ul) u = ((w > 0.0lf) == (v > 0.0lf)) ? u + 1ul : u - 1ul;\n"
    "  precise double r = s + uint64BitsToDouble(u);\n"
    "  return r;\n"
    "}\n";

/* Truncate, saturate, NaN -> 0 (kernel_eval's trunc_sat), on the bits: the truncated
 * magnitude as an integer (huge: 2^64 or more, or infinite). No float-to-int instruction is
 * used, so no optimizer can fold an int -> float -> int round trip into the identity (Mesa's
 * lavapipe did, losing the rounding the IR's exact casts test for). */
static void emit_cvt(sb *b, bool f64)
{
    const char *F = f64 ? "double" : "float", *n = f64 ? "f64" : "f32";
    if (f64)
        sb_printf(b, "uint64_t mag_f64(double x, out bool neg, out bool huge) {\n"
                     "  uint64_t u = doubleBitsToUint64(x); neg = (u >> 63) != 0ul;\n"
                     "  int e = int((u >> 52) & 0x7fful);\n"
                     "  uint64_t m = (u & 0xffffffffffffful) | (e != 0 ? 0x10000000000000ul : 0ul);\n"
                     "  int sh = max(e, 1) - 1075; huge = sh > 11;\n"
                     "  return huge ? 0ul : sh >= 0 ? m << sh : sh <= -64 ? 0ul : m >> (-sh);\n"
                     "}\n");
    else
        sb_printf(b, "uint64_t mag_f32(float x, out bool neg, out bool huge) {\n"
                     "  uint u = floatBitsToUint(x); neg = (u >> 31) != 0u;\n"
                     "  int e = int((u >> 23) & 0xffu);\n"
                     "  uint64_t m = uint64_t((u & 0x7fffffu) | (e != 0 ? 0x800000u : 0u));\n"
                     "  int sh = max(e, 1) - 150; huge = sh > 40;\n"
                     "  return huge ? 0ul : sh >= 0 ? m << sh : sh <= -64 ? 0ul : m >> (-sh);\n"
                     "}\n");
    const char *head = "  if (isnan_%s(x)) return %s; bool neg, huge; uint64_t m = mag_%s(x, neg, huge);\n";
    sb_printf(b, "uint cvt_u8_%s(%s x) {\n", n, F);
    sb_printf(b, head, n, "0u", n);
    sb_printf(b, "  return neg ? 0u : (huge || m > 255ul) ? 255u : uint(m);\n}\n");
    sb_printf(b, "uint cvt_u32_%s(%s x) {\n", n, F);
    sb_printf(b, head, n, "0u", n);
    sb_printf(b, "  return neg ? 0u : (huge || m > 0xfffffffful) ? 0xffffffffu : uint(m);\n}\n");
    sb_printf(b, "uint64_t cvt_u64_%s(%s x) {\n", n, F);
    sb_printf(b, head, n, "0ul", n);
    sb_printf(b, "  return neg ? 0ul : huge ? 0xfffffffffffffffful : m;\n}\n");
    sb_printf(b, "int cvt_i32_%s(%s x) {\n", n, F);
    sb_printf(b, head, n, "0", n);
    sb_printf(b, "  if (neg) return (huge || m > 0x80000000ul) ? int(0x80000000u) : int(0ul - m);\n"
                 "  return (huge || m > 0x7ffffffful) ? 0x7fffffff : int(m);\n}\n");
    sb_printf(b, "int64_t cvt_i64_%s(%s x) {\n", n, F);
    sb_printf(b, head, n, "0l", n);
    sb_printf(b, "  if (neg) return (huge || m > 0x8000000000000000ul) ? int64_t(0x8000000000000000ul) : int64_t(0ul - m);\n"
                 "  return (huge || m > 0x7ffffffffffffffful) ? int64_t(0x7ffffffffffffffful) : int64_t(m);\n}\n");
}

/* ---- The whole shader ---- */

static void emit_head(emitter *e, sb *b)
{
    const kir_kernel *k = e->k;
    sb_printf(b, "#version 450\n"
                 "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
    if (e->uses_8bit)
        sb_printf(b, "#extension GL_EXT_shader_8bit_storage : require\n"
                     "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n");
    if (e->uses_16bit)
        sb_printf(b, "#extension GL_EXT_shader_16bit_storage : require\n"
                     "#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require\n");
    if (e->opt.subgroups && !elementwise(k))
        sb_printf(b, "#extension GL_KHR_shader_subgroup_basic : require\n"
                     "#extension GL_KHR_shader_subgroup_shuffle_relative : require\n");
    if (e->opt.denorm32 || e->opt.nan32 || (e->uses_f64 && (e->opt.denorm64 || e->opt.nan64)))
        sb_printf(b, "#extension GL_EXT_spirv_intrinsics : require\n");
    /* SignedZeroInfNanPreserve: the NaN rules of ir/kernel.h's max, min and isnan */
    if (e->opt.nan32)
        sb_printf(b, "spirv_execution_mode(extensions = [\"SPV_KHR_float_controls\"], capabilities = [4466], 4461, 32);\n");
    if (e->opt.nan64 && e->uses_f64)
        sb_printf(b, "spirv_execution_mode(extensions = [\"SPV_KHR_float_controls\"], capabilities = [4466], 4461, 64);\n");
    /* DenormPreserve (SPV_KHR_float_controls): DESIGN.md keeps denormals where the device can */
    if (e->opt.denorm32)
        sb_printf(b, "spirv_execution_mode(extensions = [\"SPV_KHR_float_controls\"], capabilities = [4464], 4459, 32);\n");
    if (e->opt.denorm64 && e->uses_f64)
        sb_printf(b, "spirv_execution_mode(extensions = [\"SPV_KHR_float_controls\"], capabilities = [4464], 4459, 64);\n");
    sb_printf(b, "// %s\n", k->name);
    sb_printf(b, "layout(local_size_x = %d) in;\n", e->opt.wg_size);
    sb_printf(b, "layout(std430, set = 0, binding = 0) restrict readonly buffer Args { int64_t w[]; } A;\n");
    /* outputs never share memory with inputs or each other unless written in place: then
     * no promise at all (kernel.h), else restrict lets loads move past stores */
    bool in_place = false;
    for (int o = 0; o < k->n_outputs; o++)
        in_place |= k->in_place[o] != 0;
    const char *restrict_ = in_place ? "" : "restrict ";
    for (int s = 0; s < k->n_inputs; s++) {
        int ws = word_shift(e, k->inputs[s].dtype);
        sb_printf(b, "layout(std430, set = 0, binding = %d) %sreadonly buffer In%d { %s v[]; } in%d;\n", 1 + s,
                  restrict_, s, ws ? "uint" : mem_type(k->inputs[s].dtype), s);
        if (ws)
            sb_printf(b, "uint raw_in%d(uint i) { return (in%d.v[i >> %du] >> ((i & %du) * %du)) & %uu; }\n", s, s, ws,
                      (1u << ws) - 1, 32u >> ws, (1u << (32 >> ws)) - 1);
    }
    for (int o = 0; o < k->n_outputs; o++) {
        int ws = word_shift(e, k->outputs[o].dtype);
        /* parts of words: other invocations write the word's other parts, so each store clears
         * then sets only its own bits, atomically (read-write, not writeonly) */
        sb_printf(b, "layout(std430, set = 0, binding = %d) %s%sbuffer Out%d { %s v[]; } out%d;\n",
                  1 + k->n_inputs + o, restrict_, ws ? "" : "writeonly ", o, ws ? "uint" : mem_type(k->outputs[o].dtype),
                  o);
        if (ws)
            sb_printf(b, "void st_out%d(uint i, uint x) {\n"
                         "  uint sh = (i & %du) * %du, m = %uu << sh;\n"
                         "  atomicAnd(out%d.v[i >> %du], ~m); atomicOr(out%d.v[i >> %du], (x << sh) & m);\n"
                         "}\n",
                      o, (1u << ws) - 1, 32u >> ws, (1u << (32 >> ws)) - 1, o, ws, o, ws);
    }
    if (e->helpers & (H_ISNAN | H_CVT | H_FMOD))
        sb_printf(b, "%s%s", helper_isnan, e->uses_f64 ? helper_isnan_f64 : "");
    if (e->helpers & H_NARROW)
        sb_printf(b, "%s%s", helper_narrow, e->uses_f64 ? helper_narrow_f64 : "");
    if (e->helpers & H_IDIV)
        sb_printf(b, "%s", helper_idiv);
    if (e->helpers & H_MULHI)
        sb_printf(b, "%s", helper_mulhi);
    if (e->helpers & H_UDIV)
        sb_printf(b, "%s", helper_udiv);
    if (e->helpers & H_FMOD)
        sb_printf(b, "%s%s", helper_fmod_f32, e->uses_f64 ? helper_fmod_f64 : "");
    if (e->helpers & H_RINT)
        sb_printf(b, "%s", helper_rint_f64);
    if (e->helpers & H_FMA)
        sb_printf(b, "%s%s", e->opt.no_f64 || e->opt.fused32 ? native_fma_f32 : helper_fma_f32,
                  !e->uses_f64 ? "" : e->opt.fused64 ? native_fma_f64 : helper_fma_f64);
    if (e->helpers & H_CVT) {
        emit_cvt(b, false);
        if (e->uses_f64)
            emit_cvt(b, true);
    }
}

char *cg_glsl_emit(const kir_kernel *k, const cg_glsl_options *opt)
{
    char why[256];
    if (!k || !kir_valid(k, why, sizeof why)) {
        rt_fail(BURNC_ERR_INTERNAL, "glsl: invalid kernel %s: %s", k ? k->name : "(null)", k ? why : "no kernel");
        return NULL;
    }
    emitter e = {.k = k, .opt = cg_glsl_resolve(opt)};
    layout(k, &e.in_base, &e.out_base, &e.scalar_base);
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        burnc_dtype_t dt = s < k->n_inputs ? k->inputs[s].dtype : k->outputs[s - k->n_inputs].dtype;
        e.uses_8bit |= (dt == BURNC_DTYPE_U8 || dt == BURNC_DTYPE_BOOL) && !e.opt.words8;
        e.uses_16bit |= (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) && !e.opt.words16;
        e.uses_f64 |= dt == BURNC_DTYPE_F64;
    }
    size_t n = (size_t)(k->n_insts > 0 ? k->n_insts : 1);
    uint8_t *need = calloc(n, 1);
    int32_t *list = malloc(n * sizeof *list);
    sb head = {0};
    char *out = NULL;
    if (need && list) {
        if (elementwise(k))
            emit_elementwise(&e, need, list);
        else
            emit_rows(&e, need, list);
        emit_head(&e, &head);
        sb_printf(&head, "%s", e.body.s ? e.body.s : "");
    }
    if (!need || !list || e.body.oom || head.oom) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "glsl: out of memory for kernel %s", k->name);
        free(head.s);
    } else {
        out = head.s;
    }
    free(e.body.s);
    free(need);
    free(list);
    return out;
}

/* ---- Matmul ---- */

/* Argument words of cg_glsl_matmul's shader: M, N, K, batches, then the output's batch extents,
 * then A's offset and strides, then B's (BURNC_MAX_RANK slots each). */
enum { MM_BATCH = 4, MM_A = MM_BATCH + BURNC_MAX_RANK, MM_B = MM_A + 1 + BURNC_MAX_RANK, MM_WORDS = MM_B + 1 + BURNC_MAX_RANK };

size_t cg_glsl_matmul_words(void) { return MM_WORDS; }

void cg_glsl_matmul_pack(int rank, const int64_t *out_shape, int64_t k, int64_t a_off, const int64_t *a_strides,
                         int64_t b_off, const int64_t *b_strides, int64_t *w)
{
    memset(w, 0, MM_WORDS * sizeof *w);
    w[0] = out_shape[rank - 2];
    w[1] = out_shape[rank - 1];
    w[2] = k;
    w[3] = 1;
    for (int d = 0; d < rank - 2; d++) {
        w[MM_BATCH + d] = out_shape[d];
        w[3] *= out_shape[d];
    }
    w[MM_A] = a_off;
    w[MM_B] = b_off;
    for (int d = 0; d < rank; d++) {
        w[MM_A + 1 + d] = a_strides[d];
        w[MM_B + 1 + d] = b_strides[d];
    }
}

char *cg_glsl_matmul(burnc_dtype_t dt, int rank, const cg_glsl_options *opt)
{
    kir_kernel none = {.name = "matmul"};
    emitter e = {.k = &none, .opt = cg_glsl_resolve(opt)};
    bool narrow = dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16, f64 = dt == BURNC_DTYPE_F64;
    e.uses_16bit = narrow;
    e.uses_f64 = f64;
    e.helpers = H_FMA | (narrow ? H_NARROW : 0);
    const char *T = mem_type(dt), *C = f64 ? "double" : "float", *fma = f64 ? "fma_f64" : "fma_f32";
    int fmt = dt == BURNC_DTYPE_BF16;
    sb head = {0}, *b = &e.body;
    /* The same fma chain per element as the cpu device (include/burnc.h): k in increasing order
     * from +0.0, each step rounded once; tiles only change where the operands are read from. */
    sb_printf(b, "shared %s ta[16][17];\nshared %s tb[16][17];\n", C, C);
    sb_printf(b, "%s ld_a(int64_t i) { return %s; }\n", C,
              narrow ? (fmt ? "uintBitsToFloat(uint(a.v[uint(i)]) << 16)" : "h_widen(uint(a.v[uint(i)]), 0)")
                     : "a.v[uint(i)]");
    sb_printf(b, "%s ld_b(int64_t i) { return %s; }\n", C,
              narrow ? (fmt ? "uintBitsToFloat(uint(bm.v[uint(i)]) << 16)" : "h_widen(uint(bm.v[uint(i)]), 0)")
                     : "bm.v[uint(i)]");
    sb_printf(b, "void main() {\n"
                 "  int64_t M = A.w[0], N = A.w[1], K = A.w[2], NB = A.w[3];\n"
                 "  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;\n"
                 "  int64_t j = int64_t(gl_WorkGroupID.x) * 16l + int64_t(tx), i = int64_t(gl_WorkGroupID.y) * 16l + int64_t(ty);\n"
                 "  for (int64_t bt = int64_t(gl_WorkGroupID.z); bt < NB; bt += int64_t(gl_NumWorkGroups.z)) {\n"
                 "    int64_t abase = A.w[%d], bbase = A.w[%d], q = bt;\n", MM_A, MM_B);
    for (int d = rank - 3; d >= 0; d--)
        sb_printf(b, "    { int64_t x = q %% A.w[%d]; q /= A.w[%d]; abase += x * A.w[%d]; bbase += x * A.w[%d]; }\n",
                  MM_BATCH + d, MM_BATCH + d, MM_A + 1 + d, MM_B + 1 + d);
    sb_printf(b, "    int64_t sam = A.w[%d], sak = A.w[%d], sbk = A.w[%d], sbn = A.w[%d];\n", MM_A + 1 + rank - 2,
              MM_A + 1 + rank - 1, MM_B + 1 + rank - 2, MM_B + 1 + rank - 1);
    sb_printf(b, "    %s acc = %s(0);\n"
                 "    for (int64_t k0 = 0l; k0 < K; k0 += 16l) {\n"
                 "      ta[ty][tx] = (i < M && k0 + int64_t(tx) < K) ? ld_a(abase + i * sam + (k0 + int64_t(tx)) * sak) : %s(0);\n"
                 "      tb[ty][tx] = (j < N && k0 + int64_t(ty) < K) ? ld_b(bbase + (k0 + int64_t(ty)) * sbk + j * sbn) : %s(0);\n"
                 "      barrier();\n"
                 "      int kn = int(min(16l, K - k0));\n"
                 "      for (int kk = 0; kk < kn; kk++) acc = %s(ta[ty][kk], tb[kk][tx], acc);\n"
                 "      barrier();\n"
                 "    }\n"
                 "    if (i < M && j < N) c.v[uint((bt * M + i) * N + j)] = ",
              C, C, C, C, fma);
    if (narrow)
        sb_printf(b, "uint16_t(h_from_f32(acc, %d));\n", fmt);
    else
        sb_printf(b, "acc;\n");
    sb_printf(b, "  }\n}\n");
    /* the head: like emit_head's, with the matmul's bindings */
    sb_printf(&head, "#version 450\n#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
    if (narrow)
        sb_printf(&head, "#extension GL_EXT_shader_16bit_storage : require\n"
                         "#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require\n");
    sb_printf(&head, "// matmul %s rank %d\nlayout(local_size_x = 16, local_size_y = 16) in;\n"
                     "layout(std430, set = 0, binding = 0) restrict readonly buffer Args { int64_t w[]; } A;\n"
                     "layout(std430, set = 0, binding = 1) readonly buffer In0 { %s v[]; } a;\n"
                     "layout(std430, set = 0, binding = 2) readonly buffer In1 { %s v[]; } bm;\n"
                     "layout(std430, set = 0, binding = 3) writeonly buffer Out { %s v[]; } c;\n",
              ir_dtype_name(dt), rank, T, T, T);
    if (narrow)
        sb_printf(&head, "%s", helper_narrow);
    sb_printf(&head, "%s%s", e.opt.no_f64 || e.opt.fused32 ? native_fma_f32 : helper_fma_f32,
              !f64 ? "" : e.opt.fused64 ? native_fma_f64 : helper_fma_f64);
    sb_printf(&head, "%s", b->s ? b->s : "");
    free(b->s);
    if (b->oom || head.oom) {
        free(head.s);
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "glsl: out of memory for a matmul shader");
        return NULL;
    }
    return head.s;
}

/* ---- glslang and SPIRV-Tools ---- */

static once_flag glslang_once = ONCE_FLAG_INIT;
static mtx_t glslang_lock;
static atomic_long compiles;

static void glslang_init(void)
{
    glslang_initialize_process();
    mtx_init(&glslang_lock, mtx_plain);
}

const char *cg_glsl_compiler(void)
{
#define CG_STR2(x) #x
#define CG_STR(x) CG_STR2(x)
    return "glslang-" CG_STR(GLSLANG_VERSION_MAJOR) "." CG_STR(GLSLANG_VERSION_MINOR) "." CG_STR(GLSLANG_VERSION_PATCH);
}

long cg_glsl_compile_count(void) { return atomic_load(&compiles); }

static burnc_status_t validate(const char *what, const uint32_t *words, size_t n)
{
    spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_1);
    if (!ctx)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "glsl %s: cannot create a SPIRV-Tools context", what);
    spv_const_binary_t bin = {words, n};
    spv_diagnostic diag = NULL;
    spv_result_t r = spvValidate(ctx, &bin, &diag);
    burnc_status_t s = BURNC_OK;
    if (r != SPV_SUCCESS)
        s = rt_fail(BURNC_ERR_COMPILE, "glsl %s: the SPIR-V does not validate (%d): %s", what, (int)r,
                    diag && diag->error ? diag->error : "no message");
    spvDiagnosticDestroy(diag);
    spvContextDestroy(ctx);
    return s;
}

burnc_status_t cg_glsl_compile(const char *what, const char *src, uint32_t **words, size_t *n_words)
{
    *words = NULL;
    *n_words = 0;
    if (!src)
        return rt_fail(BURNC_ERR_INTERNAL, "glsl %s: no source", what);
    call_once(&glslang_once, glslang_init);
    glslang_input_t in = {
        .language = GLSLANG_SOURCE_GLSL,
        .stage = GLSLANG_STAGE_COMPUTE,
        .client = GLSLANG_CLIENT_VULKAN,
        .client_version = GLSLANG_TARGET_VULKAN_1_1,
        .target_language = GLSLANG_TARGET_SPV,
        .target_language_version = GLSLANG_TARGET_SPV_1_3,
        .code = src,
        .default_version = 450,
        .default_profile = GLSLANG_NO_PROFILE,
        .messages = GLSLANG_MSG_DEFAULT_BIT | GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT,
        .resource = glslang_default_resource(),
    };
    mtx_lock(&glslang_lock);
    atomic_fetch_add(&compiles, 1);
    burnc_status_t s = BURNC_OK;
    glslang_program_t *prog = NULL;
    glslang_shader_t *sh = glslang_shader_create(&in);
    if (!sh) {
        s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "glsl %s: glslang cannot create a shader", what);
    } else if (!glslang_shader_preprocess(sh, &in) || !glslang_shader_parse(sh, &in)) {
        s = rt_fail(BURNC_ERR_COMPILE, "glsl %s: glslang rejected the shader: %s", what,
                    glslang_shader_get_info_log(sh));
    } else if (!(prog = glslang_program_create())) {
        s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "glsl %s: glslang cannot create a program", what);
    } else {
        glslang_program_add_shader(prog, sh);
        if (!glslang_program_link(prog, GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT)) {
            s = rt_fail(BURNC_ERR_COMPILE, "glsl %s: glslang cannot link the shader: %s", what,
                        glslang_program_get_info_log(prog));
        } else {
            glslang_program_SPIRV_generate(prog, GLSLANG_STAGE_COMPUTE);
            size_t n = glslang_program_SPIRV_get_size(prog);
            *words = malloc(n * sizeof **words);
            if (!*words) {
                s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "glsl %s: no memory for %zu SPIR-V words", what, n);
            } else {
                glslang_program_SPIRV_get(prog, *words);
                *n_words = n;
            }
        }
    }
    if (prog)
        glslang_program_delete(prog);
    if (sh)
        glslang_shader_delete(sh);
    mtx_unlock(&glslang_lock);
    if (s == BURNC_OK)
        s = validate(what, *words, *n_words);
    if (s != BURNC_OK) {
        free(*words);
        *words = NULL;
        *n_words = 0;
    }
    return s;
}
