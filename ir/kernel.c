/* Building, checking, hashing and printing kernels of the kernel IR (ir/kernel.h).
 *
 * kir_valid is the gate every codegen may trust: after it says yes, a lowering never has to
 * check an operand's position or type, a slot index, or whether a row store could read a
 * reduced position. A kernel whose instruction list could not grow is marked broken by a
 * negative cap_insts (kernel.h has no flag for it): kir_emit then refuses further work and
 * kir_valid fails, while kir_free still frees what was allocated. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

/* ---- Types ------------------------------------------------------------------------------- */

kir_type kir_type_of(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F64: return KIR_F64;
    case BURNC_DTYPE_I32: return KIR_I32;
    case BURNC_DTYPE_I64: return KIR_I64;
    case BURNC_DTYPE_U8: return KIR_U8;
    case BURNC_DTYPE_BOOL: return KIR_BOOL;
    default: return KIR_F32; /* f32, and f16/bf16 widened by the load; kir_valid rejects others */
    }
}

bool kir_type_is_float(kir_type t)
{
    return t == KIR_F32 || t == KIR_F64 || t == KIR_F16 || t == KIR_BF16;
}

/* Types that hold negative values: the signed integers and the floats. */
bool kir_type_is_signed(kir_type t)
{
    return t == KIR_I32 || t == KIR_I64 || kir_type_is_float(t);
}

int kir_type_bits(kir_type t)
{
    switch (t) {
    case KIR_BOOL: return 1;
    case KIR_U8: return 8;
    case KIR_F16:
    case KIR_BF16: return 16;
    case KIR_I32:
    case KIR_U32:
    case KIR_F32: return 32;
    case KIR_I64:
    case KIR_U64:
    case KIR_F64: return 64;
    }
    return 0;
}

/* Instruction types: everything but the storage-only F16 and BF16. */
static bool is_value_type(int t) { return t >= KIR_BOOL && t <= KIR_F64; }
static bool is_int_type(int t) { return t >= KIR_U8 && t <= KIR_U64; }
static bool is_arith_type(int t) { return is_int_type(t) || t == KIR_F32 || t == KIR_F64; }
static bool is_fp_type(int t) { return t == KIR_F32 || t == KIR_F64; }

/* ---- Building ---------------------------------------------------------------------------- */

void kir_init(kir_kernel *k, int rank, int n_outer)
{
    memset(k, 0, sizeof *k);
    k->rank = rank;
    k->n_outer = n_outer;
}

void kir_free(kir_kernel *k)
{
    free(k->insts);
    k->insts = NULL;
    k->n_insts = 0;
    k->cap_insts = 0;
}

static bool grow(kir_kernel *k)
{
    int cap = k->cap_insts ? k->cap_insts * 2 : 64;
    kir_inst *p = realloc(k->insts, (size_t)cap * sizeof *p);
    if (!p)
        return false;
    k->insts = p;
    k->cap_insts = cap;
    return true;
}

int32_t kir_emit(kir_kernel *k, kir_opcode op, kir_type type, int32_t a, int32_t b, int32_t c)
{
    if (k->cap_insts < 0 || k->n_insts < 0)
        return -1;
    if (k->n_insts == k->cap_insts && (k->cap_insts > INT32_MAX / 2 || !grow(k))) {
        k->cap_insts = -1; /* broken */
        return -1;
    }
    kir_inst *in = &k->insts[k->n_insts];
    memset(in, 0, sizeof *in);
    in->op = (uint8_t)op;
    in->type = (uint8_t)type;
    in->a = a;
    in->b = b;
    in->c = c;
    return k->n_insts++;
}

/* Two's complement wrap of a 64-bit pattern to the integer type, as a canonical value:
 * signed types sign-extended, unsigned ones zero-extended, bool 0 or 1. */
static uint64_t wrap_bits(kir_type t, uint64_t u)
{
    switch (t) {
    case KIR_BOOL: return u != 0;
    case KIR_U8: return u & 0xffu;
    case KIR_U32: return u & 0xffffffffu;
    case KIR_I32: return (u & 0x80000000u) ? (u | ~UINT64_C(0xffffffff)) : (u & 0xffffffffu);
    default: return u;
    }
}

int32_t kir_const_i(kir_kernel *k, kir_type type, int64_t v)
{
    int32_t i = kir_emit(k, KIR_CONST, type, -1, -1, -1);
    if (i < 0)
        return -1;
    kir_scalar *imm = &k->insts[i].imm;
    if (type == KIR_F32)
        imm->f = (float)v; /* one rounding, from the integer */
    else if (type == KIR_F64)
        imm->f = (double)v;
    else
        imm->u = wrap_bits(type, (uint64_t)v);
    return i;
}

int32_t kir_const_f(kir_kernel *k, kir_type type, double v)
{
    int32_t i = kir_emit(k, KIR_CONST, type, -1, -1, -1);
    if (i < 0)
        return -1;
    kir_scalar *imm = &k->insts[i].imm;
    switch (type) {
    case KIR_F32: imm->f = (float)v; break;
    case KIR_F64: imm->f = v; break;
    case KIR_BOOL: imm->u = v != 0; break; /* NaN is true */
    case KIR_U8: imm->u = (uint64_t)ir_trunc_sat(v, 0, UINT8_MAX); break;
    case KIR_I32: imm->i = ir_trunc_sat(v, INT32_MIN, INT32_MAX); break;
    case KIR_U32: imm->u = (uint64_t)ir_trunc_sat(v, 0, UINT32_MAX); break;
    case KIR_I64: imm->i = ir_trunc_sat(v, INT64_MIN, INT64_MAX); break;
    case KIR_U64: imm->u = ir_trunc_sat_u64(v); break;
    default: imm->f = v; break; /* not a value type: kir_valid says so */
    }
    return i;
}

/* ---- Validity ---------------------------------------------------------------------------- */

static bool fail(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return false;
}

static const char *const OP_NAMES[KIR_OPCODE_COUNT] = {
    [KIR_LOAD] = "load",     [KIR_CONST] = "const",     [KIR_ARG] = "arg",         [KIR_INDEX] = "index",
    [KIR_EXTENT] = "extent", [KIR_ROW_LEN] = "row_len", [KIR_REDUCED] = "reduced", [KIR_NEG] = "neg",
    [KIR_ABS] = "abs",       [KIR_SQRT] = "sqrt",       [KIR_FLOOR] = "floor",     [KIR_CEIL] = "ceil",
    [KIR_TRUNC] = "trunc",   [KIR_RINT] = "rint",       [KIR_NOT] = "not",         [KIR_CONVERT] = "convert",
    [KIR_BITCAST] = "bitcast", [KIR_ROUND] = "round",   [KIR_ADD] = "add",         [KIR_SUB] = "sub",
    [KIR_MUL] = "mul",       [KIR_DIV] = "div",         [KIR_REM] = "rem",         [KIR_MULHI] = "mulhi",
    [KIR_AND] = "and",       [KIR_OR] = "or",           [KIR_XOR] = "xor",         [KIR_SHL] = "shl",
    [KIR_SHR] = "shr",       [KIR_EQ] = "eq",           [KIR_NE] = "ne",           [KIR_LT] = "lt",
    [KIR_LE] = "le",         [KIR_GT] = "gt",           [KIR_GE] = "ge",           [KIR_FMA] = "fma",
    [KIR_SELECT] = "select",
};

static const char *const TYPE_NAMES[] = {
    [KIR_BOOL] = "bool", [KIR_U8] = "u8",   [KIR_I32] = "i32", [KIR_U32] = "u32", [KIR_I64] = "i64",
    [KIR_U64] = "u64",   [KIR_F32] = "f32", [KIR_F64] = "f64", [KIR_F16] = "f16", [KIR_BF16] = "bf16",
};

static const char *const COMBINER_NAMES[] = {
    [KIR_COMBINE_SUM] = "sum", [KIR_COMBINE_PROD] = "prod",     [KIR_COMBINE_MAX] = "max",
    [KIR_COMBINE_MIN] = "min", [KIR_COMBINE_ARGMAX] = "argmax", [KIR_COMBINE_ARGMIN] = "argmin",
};

static const char *op_name(int op) { return op >= 0 && op < KIR_OPCODE_COUNT ? OP_NAMES[op] : "?"; }
static const char *type_name(int t) { return t >= KIR_BOOL && t <= KIR_BF16 ? TYPE_NAMES[t] : "?"; }

static bool is_compare(int op) { return op >= KIR_EQ && op <= KIR_GE; }
static bool is_arg_combiner(int c) { return c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN; }

/* The type a stage's KIR_REDUCED has; -1 when the stage's value is out of range. */
static int stage_type(const kir_kernel *k, int s)
{
    const kir_stage *st = &k->stages[s];
    if (is_arg_combiner(st->combiner))
        return KIR_I64;
    if (st->value < 0 || st->value >= k->n_insts)
        return -1;
    return k->insts[st->value].type;
}

/* A leaf's fields: slot, axis or stage in range, and its result type. */
static bool check_leaf(const kir_kernel *k, int i, const kir_inst *in, char *why, size_t cap)
{
    switch (in->op) {
    case KIR_LOAD:
        if (in->a < 0 || in->a >= k->n_inputs)
            return fail(why, cap, "%%%d: load of input %d, the kernel has %d", i, in->a, k->n_inputs);
        if (in->type != kir_type_of(k->inputs[in->a].dtype))
            return fail(why, cap, "%%%d: load of a %s input gives %s, not %s", i,
                        ir_dtype_name(k->inputs[in->a].dtype), type_name(kir_type_of(k->inputs[in->a].dtype)),
                        type_name(in->type));
        return true;
    case KIR_CONST: return true;
    case KIR_ARG:
        if (in->a < 0 || in->a >= k->n_scalars)
            return fail(why, cap, "%%%d: scalar argument %d, the kernel has %d", i, in->a, k->n_scalars);
        return true;
    case KIR_INDEX:
    case KIR_EXTENT:
    case KIR_ROW_LEN:
        if (in->op != KIR_ROW_LEN && (in->a < 0 || in->a >= k->rank))
            return fail(why, cap, "%%%d: %s of axis %d, rank %d", i, op_name(in->op), in->a, k->rank);
        if (in->type != KIR_I64)
            return fail(why, cap, "%%%d: %s must be i64", i, op_name(in->op));
        return true;
    case KIR_REDUCED:
        if (in->a < 0 || in->a >= k->n_stages)
            return fail(why, cap, "%%%d: reduced of stage %d, the kernel has %d", i, in->a, k->n_stages);
        if (in->type != stage_type(k, in->a))
            return fail(why, cap, "%%%d: reduced of stage %d must be %s", i, in->a, type_name(stage_type(k, in->a)));
        return true;
    }
    return fail(why, cap, "%%%d: opcode %d is not a leaf", i, in->op);
}

/* Operand types of the non-leaf opcodes (operands already known to precede i). */
static bool check_types(const kir_kernel *k, int i, const kir_inst *in, char *why, size_t cap)
{
    int t = in->type;
    int ta = k->insts[in->a].type;
    int tb = kir_n_operands(in->op) >= 2 ? k->insts[in->b].type : t;
    int tc = kir_n_operands(in->op) >= 3 ? k->insts[in->c].type : t;
    const char *what = NULL;
    switch (in->op) {
    case KIR_NEG:
    case KIR_ABS:
        if (!is_arith_type(t) || ta != t)
            what = "a number type and an operand of that type";
        break;
    case KIR_SQRT:
    case KIR_FLOOR:
    case KIR_CEIL:
    case KIR_TRUNC:
    case KIR_RINT:
        if (!is_fp_type(t) || ta != t)
            what = "f32 or f64 and an operand of that type";
        break;
    case KIR_NOT:
        if (!(is_int_type(t) || t == KIR_BOOL) || ta != t)
            what = "an integer or bool type and an operand of that type";
        break;
    case KIR_CONVERT: break; /* any value type to any value type */
    case KIR_BITCAST:
        if (t == KIR_BOOL || ta == KIR_BOOL || kir_type_bits(t) != kir_type_bits(ta))
            what = "two non-bool types of the same width";
        break;
    case KIR_ROUND:
        if (t != KIR_F32 || ta != KIR_F32 || (in->imm.i != KIR_F16 && in->imm.i != KIR_BF16))
            what = "f32, an f32 operand and imm.i KIR_F16 or KIR_BF16";
        break;
    case KIR_ADD:
    case KIR_SUB:
    case KIR_MUL:
    case KIR_DIV:
    case KIR_REM:
        if (!is_arith_type(t) || ta != t || tb != t)
            what = "a number type and operands of that type";
        break;
    case KIR_MULHI:
        if ((t != KIR_U32 && t != KIR_U64) || ta != t || tb != t)
            what = "u32 or u64 and operands of that type";
        break;
    case KIR_AND:
    case KIR_OR:
    case KIR_XOR:
        if (!(is_int_type(t) || t == KIR_BOOL) || ta != t || tb != t)
            what = "an integer or bool type and operands of that type";
        break;
    case KIR_SHL:
    case KIR_SHR:
        if (!is_int_type(t) || ta != t || tb != t)
            what = "an integer type and operands of that type";
        break;
    case KIR_FMA:
        if (!is_fp_type(t) || ta != t || tb != t || tc != t)
            what = "f32 or f64 and operands of that type";
        break;
    case KIR_SELECT:
        if (ta != KIR_BOOL || tb != t || tc != t)
            what = "a bool condition and two operands of the result type";
        break;
    default:
        if (is_compare(in->op) && (t != KIR_BOOL || ta != tb))
            what = "a bool result and two operands of one type";
        break;
    }
    if (what)
        return fail(why, cap, "%%%d: %s.%s needs %s (operands %s %s %s)", i, op_name(in->op), type_name(t), what,
                    type_name(ta), kir_n_operands(in->op) >= 2 ? type_name(tb) : "",
                    kir_n_operands(in->op) >= 3 ? type_name(tc) : "");
    return true;
}

static bool check_inst(const kir_kernel *k, int i, char *why, size_t cap)
{
    const kir_inst *in = &k->insts[i];
    if (in->op >= KIR_OPCODE_COUNT)
        return fail(why, cap, "%%%d: opcode %d out of range", i, in->op);
    if (!is_value_type(in->type))
        return fail(why, cap, "%%%d: %s has type %s, not a value type", i, op_name(in->op), type_name(in->type));
    int n = kir_n_operands(in->op);
    if (n == 0)
        return check_leaf(k, i, in, why, cap);
    const int32_t ops[3] = {in->a, in->b, in->c};
    for (int j = 0; j < n; j++)
        if (ops[j] < 0 || ops[j] >= i)
            return fail(why, cap, "%%%d: %s operand %c is %%%d, which does not precede it", i, op_name(in->op),
                        "abc"[j], ops[j]);
    return check_types(k, i, in, why, cap);
}

static bool check_slots(const kir_kernel *k, const kir_slot *slots, int n, const char *kind, char *why, size_t cap)
{
    for (int s = 0; s < n; s++) {
        if (!ir_dtype_valid(slots[s].dtype))
            return fail(why, cap, "%s %d: dtype %d is not a storage dtype", kind, s, (int)slots[s].dtype);
        for (int d = 0; d < k->rank; d++)
            if (slots[s].stride[d] > KIR_STRIDE_ANY)
                return fail(why, cap, "%s %d: stride class %d on axis %d", kind, s, slots[s].stride[d], d);
    }
    return true;
}

static bool check_counts(const kir_kernel *k, char *why, size_t cap)
{
    if (k->cap_insts < 0)
        return fail(why, cap, "out of memory while building the kernel");
    if (k->rank < 0 || k->rank > BURNC_MAX_RANK || k->n_outer < 0 || k->n_outer > k->rank)
        return fail(why, cap, "rank %d with %d outer axes", k->rank, k->n_outer);
    if (k->n_inputs < 0 || k->n_inputs > KIR_MAX_INPUTS || k->n_outputs < 0 || k->n_outputs > KIR_MAX_OUTPUTS)
        return fail(why, cap, "%d inputs and %d outputs (at most %d and %d)", k->n_inputs, k->n_outputs,
                    KIR_MAX_INPUTS, KIR_MAX_OUTPUTS);
    if (k->n_stages < 0 || k->n_stages > KIR_MAX_STAGES || k->n_stores < 0 || k->n_stores > KIR_MAX_OUTPUTS)
        return fail(why, cap, "%d stages and %d stores (at most %d and %d)", k->n_stages, k->n_stores,
                    KIR_MAX_STAGES, KIR_MAX_OUTPUTS);
    if (k->n_scalars < 0)
        return fail(why, cap, "%d scalar arguments", k->n_scalars);
    if (k->n_insts < 0 || k->n_insts > k->cap_insts || (k->n_insts > 0 && !k->insts))
        return fail(why, cap, "%d instructions in an array of %d", k->n_insts, k->cap_insts);
    return true;
}

/* Per instruction: which stages' results it reads (bit s), and whether it changes from one
 * reduced position of a row to the next. */
typedef struct dep_info {
    uint8_t stages;
    bool varies;
} dep_info;

static bool slot_varies(const kir_kernel *k, const kir_slot *s)
{
    for (int d = k->n_outer; d < k->rank; d++)
        if (s->stride[d] != KIR_STRIDE_ZERO)
            return true;
    return false;
}

static void compute_deps(const kir_kernel *k, dep_info *dep)
{
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        dep_info d = {0, false};
        if (in->op == KIR_REDUCED)
            d.stages = (uint8_t)(1u << in->a);
        else if (in->op == KIR_INDEX)
            d.varies = in->a >= k->n_outer;
        else if (in->op == KIR_LOAD)
            d.varies = slot_varies(k, &k->inputs[in->a]);
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++) {
            d.stages |= dep[ops[j]].stages;
            d.varies |= dep[ops[j]].varies;
        }
        dep[i] = d;
    }
}

/* What REDUCED's type and the stores rest on, checked before the instructions that use it. */
static bool check_stage_heads(const kir_kernel *k, char *why, size_t cap)
{
    for (int s = 0; s < k->n_stages; s++) {
        const kir_stage *st = &k->stages[s];
        if (st->combiner > KIR_COMBINE_ARGMIN)
            return fail(why, cap, "stage %d: combiner %d out of range", s, st->combiner);
        if (st->value < 0 || st->value >= k->n_insts)
            return fail(why, cap, "stage %d: value %%%d out of range", s, st->value);
        int t = k->insts[st->value].type;
        bool arith = st->combiner == KIR_COMBINE_SUM || st->combiner == KIR_COMBINE_PROD;
        if (arith ? !is_arith_type(t) : !is_value_type(t))
            return fail(why, cap, "stage %d: %s over %s values", s, COMBINER_NAMES[st->combiner], type_name(t));
    }
    return true;
}

static bool check_stage_deps(const kir_kernel *k, const dep_info *dep, char *why, size_t cap)
{
    for (int s = 0; s < k->n_stages; s++)
        if (dep[k->stages[s].value].stages >> s)
            return fail(why, cap, "stage %d: its value reads the result of stage %d or later", s, s);
    return true;
}

/* Stores convert to the slot's dtype with one rounding: the value has the type a load of the
 * slot gives, or the slot is f16/bf16 and the value is f64 or an integer (a cast from them
 * rounds once, from the exact value). */
static bool store_type_ok(int t, burnc_dtype_t dt)
{
    if (t == (int)kir_type_of(dt))
        return true;
    return (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) && (t == KIR_F64 || is_int_type(t));
}

static bool check_stores(const kir_kernel *k, const dep_info *dep, char *why, size_t cap)
{
    int stored[KIR_MAX_OUTPUTS] = {0};
    for (int s = 0; s < k->n_stores; s++) {
        const kir_store *st = &k->stores[s];
        if (st->slot < 0 || st->slot >= k->n_outputs)
            return fail(why, cap, "store %d: output %d, the kernel has %d", s, st->slot, k->n_outputs);
        if (st->value < 0 || st->value >= k->n_insts)
            return fail(why, cap, "store %d: value %%%d out of range", s, st->value);
        burnc_dtype_t dt = k->outputs[st->slot].dtype;
        int t = k->insts[st->value].type;
        if (!store_type_ok(t, dt))
            return fail(why, cap, "store %d: a %s value into a %s output", s, type_name(t), ir_dtype_name(dt));
        if (st->row && dep[st->value].varies)
            return fail(why, cap, "store %d: a row store whose value depends on the reduced positions", s);
        stored[st->slot]++;
    }
    for (int o = 0; o < k->n_outputs; o++)
        if (stored[o] != 1)
            return fail(why, cap, "output %d is stored %d times (exactly once needed)", o, stored[o]);
    return true;
}

/* An in-place output: an input of its dtype, written by element stores only. */
static bool check_in_place(const kir_kernel *k, char *why, size_t cap)
{
    for (int o = 0; o < k->n_outputs; o++) {
        int in = k->in_place[o] - 1;
        if (in < 0)
            continue;
        if (in >= k->n_inputs || k->inputs[in].dtype != k->outputs[o].dtype)
            return fail(why, cap, "output %d: in place of input %d, which is no input of its dtype", o, in);
        for (int s = 0; s < k->n_stores; s++)
            if (k->stores[s].slot == o && k->stores[s].row)
                return fail(why, cap, "output %d: in place of input %d, but written by a row store", o, in);
    }
    return true;
}

bool kir_valid(const kir_kernel *k, char *why, size_t cap)
{
    if (!k)
        return fail(why, cap, "no kernel");
    if (!check_counts(k, why, cap) || !check_slots(k, k->inputs, k->n_inputs, "input", why, cap) ||
        !check_slots(k, k->outputs, k->n_outputs, "output", why, cap) || !check_stage_heads(k, why, cap))
        return false;
    for (int i = 0; i < k->n_insts; i++)
        if (!check_inst(k, i, why, cap))
            return false;
    dep_info *dep = malloc((size_t)(k->n_insts > 0 ? k->n_insts : 1) * sizeof *dep);
    if (!dep)
        return fail(why, cap, "out of memory while checking the kernel");
    compute_deps(k, dep);
    bool ok = check_stage_deps(k, dep, why, cap) && check_stores(k, dep, why, cap) && check_in_place(k, why, cap);
    free(dep);
    if (ok && why && cap)
        why[0] = '\0';
    return ok;
}

/* ---- Hash -------------------------------------------------------------------------------- */

/* FNV-1a over a fixed little-endian serialization: the same kernel hashes the same on every
 * machine and in every run, whatever the struct's padding holds. */
typedef struct hasher {
    uint64_t h;
} hasher;

static void h_bytes(hasher *h, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        h->h ^= (v >> (8 * i)) & 0xffu;
        h->h *= UINT64_C(0x100000001b3);
    }
}

static void h_int(hasher *h, int64_t v) { h_bytes(h, (uint64_t)v, 8); }

static void h_slots(hasher *h, const kir_kernel *k, const kir_slot *slots, int n)
{
    for (int s = 0; s < n; s++) {
        h_int(h, slots[s].dtype);
        for (int d = 0; d < k->rank && d < BURNC_MAX_RANK; d++)
            h_bytes(h, slots[s].stride[d], 1);
    }
}

/* The name is left out: it is for people, and kernels that differ only in it share code. */
uint64_t kir_hash(const kir_kernel *k)
{
    hasher h = {UINT64_C(0xcbf29ce484222325)};
    h_int(&h, k->rank);
    h_int(&h, k->n_outer);
    h_int(&h, k->n_scalars);
    int n_in = k->n_inputs < 0 ? 0 : k->n_inputs > KIR_MAX_INPUTS ? KIR_MAX_INPUTS : k->n_inputs;
    int n_out = k->n_outputs < 0 ? 0 : k->n_outputs > KIR_MAX_OUTPUTS ? KIR_MAX_OUTPUTS : k->n_outputs;
    int n_stages = k->n_stages < 0 ? 0 : k->n_stages > KIR_MAX_STAGES ? KIR_MAX_STAGES : k->n_stages;
    int n_stores = k->n_stores < 0 ? 0 : k->n_stores > KIR_MAX_OUTPUTS ? KIR_MAX_OUTPUTS : k->n_stores;
    h_int(&h, n_in);
    h_slots(&h, k, k->inputs, n_in);
    h_int(&h, n_out);
    h_slots(&h, k, k->outputs, n_out);
    for (int o = 0; o < n_out; o++)
        h_bytes(&h, k->in_place[o], 1);
    h_int(&h, n_stages);
    for (int s = 0; s < n_stages; s++) {
        h_int(&h, k->stages[s].combiner);
        h_int(&h, k->stages[s].value);
    }
    h_int(&h, n_stores);
    for (int s = 0; s < n_stores; s++) {
        h_int(&h, k->stores[s].slot);
        h_int(&h, k->stores[s].value);
        h_int(&h, k->stores[s].row);
    }
    int n = k->insts && k->n_insts > 0 ? k->n_insts : 0;
    h_int(&h, n);
    for (int i = 0; i < n; i++) {
        const kir_inst *in = &k->insts[i];
        h_bytes(&h, in->op, 1);
        h_bytes(&h, in->type, 1);
        h_int(&h, in->a);
        h_int(&h, in->b);
        h_int(&h, in->c);
        h_bytes(&h, in->imm.u, 8);
    }
    return h.h;
}

/* ---- Listing ----------------------------------------------------------------------------- */

typedef struct strbuf {
    char *p;
    size_t n, cap;
    bool oom;
} strbuf;

static void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *sb, const char *fmt, ...)
{
    if (sb->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(sb->p + sb->n, sb->cap - sb->n, fmt, ap);
        va_end(ap);
        if (w < 0) {
            sb->oom = true;
            return;
        }
        if ((size_t)w < sb->cap - sb->n) {
            sb->n += (size_t)w;
            return;
        }
        size_t cap = (sb->cap + (size_t)w + 1) * 2;
        char *p = realloc(sb->p, cap);
        if (!p) {
            sb->oom = true;
            return;
        }
        sb->p = p;
        sb->cap = cap;
    }
}

static void print_slots(strbuf *sb, const kir_kernel *k, const kir_slot *slots, int n, const char *kind)
{
    static const char STRIDE_CHARS[] = "01s";
    for (int s = 0; s < n; s++) {
        sb_printf(sb, "  %s%d %s [", kind, s, ir_dtype_name(slots[s].dtype));
        for (int d = 0; d < k->rank; d++)
            sb_printf(sb, "%c", slots[s].stride[d] <= KIR_STRIDE_ANY ? STRIDE_CHARS[slots[s].stride[d]] : '?');
        sb_printf(sb, "]\n");
    }
}

static void print_inst(strbuf *sb, const kir_kernel *k, int i)
{
    const kir_inst *in = &k->insts[i];
    sb_printf(sb, "  %%%d = %s.%s", i, op_name(in->op), type_name(in->type));
    switch (in->op) {
    case KIR_LOAD: sb_printf(sb, " in%d", in->a); break;
    case KIR_CONST:
        if (is_fp_type(in->type))
            sb_printf(sb, " %.17g", in->imm.f);
        else if (in->type == KIR_U64)
            sb_printf(sb, " %llu", (unsigned long long)in->imm.u);
        else
            sb_printf(sb, " %lld", (long long)in->imm.i);
        break;
    case KIR_ARG: sb_printf(sb, " s%d", in->a); break;
    case KIR_INDEX:
    case KIR_EXTENT: sb_printf(sb, " axis%d", in->a); break;
    case KIR_ROW_LEN: break;
    case KIR_REDUCED: sb_printf(sb, " stage%d", in->a); break;
    case KIR_ROUND: sb_printf(sb, " %%%d to %s", in->a, type_name((int)in->imm.i)); break;
    default: {
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            sb_printf(sb, "%s%%%d", j ? ", " : " ", ops[j]);
    }
    }
    sb_printf(sb, "\n");
}

char *kir_print(const kir_kernel *k)
{
    strbuf sb = {.p = malloc(1024), .cap = 1024};
    if (!sb.p)
        return NULL;
    sb_printf(&sb, "kernel %s: rank %d, %d outer, %d scalars\n", k->name[0] ? k->name : "(unnamed)", k->rank,
              k->n_outer, k->n_scalars);
    int n_in = k->n_inputs >= 0 && k->n_inputs <= KIR_MAX_INPUTS ? k->n_inputs : 0;
    int n_out = k->n_outputs >= 0 && k->n_outputs <= KIR_MAX_OUTPUTS ? k->n_outputs : 0;
    print_slots(&sb, k, k->inputs, n_in, "in");
    print_slots(&sb, k, k->outputs, n_out, "out");
    for (int i = 0; k->insts && i < k->n_insts; i++)
        print_inst(&sb, k, i);
    for (int s = 0; s >= 0 && s < k->n_stages && s < KIR_MAX_STAGES; s++)
        sb_printf(&sb, "  stage%d = %s %%%d\n", s,
                  k->stages[s].combiner <= KIR_COMBINE_ARGMIN ? COMBINER_NAMES[k->stages[s].combiner] : "?",
                  k->stages[s].value);
    for (int s = 0; s >= 0 && s < k->n_stores && s < KIR_MAX_OUTPUTS; s++) {
        int slot = k->stores[s].slot, in = slot >= 0 && slot < KIR_MAX_OUTPUTS ? k->in_place[slot] - 1 : -1;
        sb_printf(&sb, "  out%d <- %%%d%s", slot, k->stores[s].value, k->stores[s].row ? " (row)" : "");
        if (in >= 0)
            sb_printf(&sb, " (in place of in%d)", in);
        sb_printf(&sb, "\n");
    }
    if (sb.oom) {
        free(sb.p);
        return NULL;
    }
    return sb.p;
}
