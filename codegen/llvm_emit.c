/* The per-instruction lowering shared by the CPU and PTX generators (llvm_emit.h). Moved out of
 * llvm_cpu.c unchanged, so the CPU's code is what it was. */
#include <math.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen/llvm_emit.h"
#include "codegen/llvm_host.h"

void cg_emit_types(cg_emit *g)
{
    LLVMContextRef c = g->ctx;
    g->t_void = LLVMVoidTypeInContext(c);
    g->t_i1 = LLVMInt1TypeInContext(c);
    g->t_i8 = LLVMInt8TypeInContext(c);
    g->t_i16 = LLVMInt16TypeInContext(c);
    g->t_i32 = LLVMInt32TypeInContext(c);
    g->t_i64 = LLVMInt64TypeInContext(c);
    g->t_f32 = LLVMFloatTypeInContext(c);
    g->t_f64 = LLVMDoubleTypeInContext(c);
    g->t_ptr = LLVMPointerTypeInContext(c, 0);
}

void cg_module_begin(cg_emit *g, LLVMTargetMachineRef tm, const char *triple, const char *name)
{
    g->ctx = LLVMContextCreate();
    g->mod = LLVMModuleCreateWithNameInContext(name, g->ctx);
    g->b = LLVMCreateBuilderInContext(g->ctx);
    cg_emit_types(g);
    LLVMSetTarget(g->mod, triple);
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(g->mod, layout);
    LLVMDisposeTargetData(layout);
}

void cg_module_end(cg_emit *g, LLVMTargetMachineRef tm)
{
    LLVMDisposeBuilder(g->b);
    LLVMDisposeModule(g->mod);
    LLVMContextDispose(g->ctx);
    LLVMDisposeTargetMachine(tm);
}

bool cg_emit_module(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *passes, bool object, const char *what,
                    char **out, size_t *size, char *err, size_t cap)
{
    char *msg = NULL;
    bool ok = !LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg) ||
              cg_failf(err, cap, "%s: invalid IR: %s", what, msg ? msg : "");
    LLVMDisposeMessage(msg);
    msg = NULL;
    if (ok) {
        LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
        LLVMErrorRef e = LLVMRunPasses(mod, passes, tm, po);
        LLVMDisposePassBuilderOptions(po);
        if (e) {
            char *m = LLVMGetErrorMessage(e);
            ok = cg_failf(err, cap, "%s: %s: %s", what, passes, m);
            LLVMDisposeErrorMessage(m);
        }
    }
    LLVMMemoryBufferRef mb = NULL;
    if (ok && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, object ? LLVMObjectFile : LLVMAssemblyFile, &msg, &mb))
        ok = cg_failf(err, cap, "%s: %s emission failed: %s", what, object ? "object" : "assembly", msg ? msg : "");
    LLVMDisposeMessage(msg);
    return ok && cg_buffer_text(mb, object, out, size, what, err, cap);
}


/* kir_valid's type rules, restated: LLVM would accept an operand of the wrong width and
 * then store 8 bytes into a 4-byte slot, so a kernel that breaks them never reaches the
 * builder. */
static bool inst_types_ok(const kir_kernel *k, const kir_inst *in)
{
    int t = in->type, ta = in->a >= 0 ? k->insts[in->a].type : -1;
    int tb = kir_n_operands(in->op) >= 2 ? k->insts[in->b].type : t;
    int tc = kir_n_operands(in->op) >= 3 ? k->insts[in->c].type : t;
    bool arith = t != KIR_BOOL;
    switch (in->op) {
    case KIR_NEG:
    case KIR_ABS: return arith && ta == t;
    case KIR_SQRT:
    case KIR_FLOOR:
    case KIR_CEIL:
    case KIR_TRUNC:
    case KIR_RINT: return t_fp(t) && ta == t;
    case KIR_NOT: return !t_fp(t) && ta == t;
    case KIR_CONVERT: return t_value(ta);
    case KIR_BITCAST: return t != KIR_BOOL && ta != KIR_BOOL && t_bits(t) == t_bits(ta);
    case KIR_ROUND: return t == KIR_F32 && ta == KIR_F32 && (in->imm.i == KIR_F16 || in->imm.i == KIR_BF16);
    case KIR_ADD:
    case KIR_SUB:
    case KIR_MUL:
    case KIR_DIV:
    case KIR_REM: return arith && ta == t && tb == t;
    case KIR_MULHI: return (t == KIR_U32 || t == KIR_U64) && ta == t && tb == t;
    case KIR_AND:
    case KIR_OR:
    case KIR_XOR: return !t_fp(t) && ta == t && tb == t;
    case KIR_SHL:
    case KIR_SHR: return arith && !t_fp(t) && ta == t && tb == t;
    case KIR_EQ:
    case KIR_NE:
    case KIR_LT:
    case KIR_LE:
    case KIR_GT:
    case KIR_GE: return t == KIR_BOOL && ta == tb;
    case KIR_FMA: return t_fp(t) && ta == t && tb == t && tc == t;
    case KIR_SELECT: return ta == KIR_BOOL && tb == t && tc == t;
    default: return false;
    }
}

static bool leaf_ok(const kir_kernel *k, const kir_inst *in)
{
    switch (in->op) {
    case KIR_LOAD: return in->a >= 0 && in->a < k->n_inputs && in->type == dt_type(k->inputs[in->a].dtype);
    case KIR_CONST: return true;
    case KIR_ARG: return in->a >= 0 && in->a < k->n_scalars;
    case KIR_INDEX:
    case KIR_EXTENT: return in->a >= 0 && in->a < k->rank && in->type == KIR_I64;
    case KIR_ROW_LEN: return in->type == KIR_I64;
    default: /* KIR_REDUCED */
        if (in->a < 0 || in->a >= k->n_stages || k->stages[in->a].value < 0 || k->stages[in->a].value >= k->n_insts)
            return false;
        return in->type == (is_arg_comb(k->stages[in->a].combiner) ? KIR_I64 : k->insts[k->stages[in->a].value].type);
    }
}

static bool store_ok(int t, burnc_dtype_t dt)
{
    return t == dt_type(dt) || (dt_narrow(dt) && t != KIR_BOOL && t != KIR_F32);
}

bool cg_check_kernel(const kir_kernel *k, const char *what, char *err, size_t cap)
{
    if (!k || k->rank < 0 || k->rank > BURNC_MAX_RANK || k->n_outer < 0 || k->n_outer > k->rank || k->n_inputs < 0 ||
        k->n_inputs > KIR_MAX_INPUTS || k->n_outputs < 0 || k->n_outputs > KIR_MAX_OUTPUTS || k->n_stages < 0 ||
        k->n_stages > KIR_MAX_STAGES || k->n_stores < 0 || k->n_stores > KIR_MAX_OUTPUTS || k->n_scalars < 0 ||
        k->n_insts < 0 || (k->n_insts > 0 && !k->insts))
        return cg_failf(err, cap, "%s: the kernel's counts are out of range", what);
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        const kir_slot *sl = s < k->n_inputs ? &k->inputs[s] : &k->outputs[s - k->n_inputs];
        if (!dt_valid(sl->dtype))
            return cg_failf(err, cap, "%s %s: slot %d has dtype %d", what, k->name, s, (int)sl->dtype);
        for (int d = 0; d < k->rank; d++)
            if (sl->stride[d] > KIR_STRIDE_ANY)
                return cg_failf(err, cap, "%s %s: slot %d has stride class %d", what, k->name, s, sl->stride[d]);
    }
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        if (in->op >= KIR_OPCODE_COUNT || !t_value(in->type))
            return cg_failf(err, cap, "%s %s: %%%d has opcode %d, type %d", what, k->name, i, in->op, in->type);
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            if (ops[j] < 0 || ops[j] >= i)
                return cg_failf(err, cap, "%s %s: %%%d reads %%%d", what, k->name, i, ops[j]);
        if (!(kir_n_operands(in->op) == 0 ? leaf_ok(k, in) : inst_types_ok(k, in)))
            return cg_failf(err, cap, "%s %s: %%%d (opcode %d) has the wrong operand or result types", what, k->name, i,
                         in->op);
    }
    for (int s = 0; s < k->n_stages; s++) {
        const kir_stage *st = &k->stages[s];
        if (st->combiner > KIR_COMBINE_ARGMIN || st->value < 0 || st->value >= k->n_insts)
            return cg_failf(err, cap, "%s %s: stage %d is malformed", what, k->name, s);
        int t = k->insts[st->value].type;
        if (st->combiner <= KIR_COMBINE_PROD && t == KIR_BOOL)
            return cg_failf(err, cap, "%s %s: stage %d sums booleans", what, k->name, s);
    }
    for (int s = 0; s < k->n_stores; s++) {
        const kir_store *st = &k->stores[s];
        if (st->slot < 0 || st->slot >= k->n_outputs || st->value < 0 || st->value >= k->n_insts ||
            !store_ok(k->insts[st->value].type, k->outputs[st->slot].dtype))
            return cg_failf(err, cap, "%s %s: store %d is malformed", what, k->name, s);
    }
    return true;
}

LLVMTypeRef cg_ty_of(cg_emit *g, int t)
{
    switch (t) {
    case KIR_BOOL: return g->t_i1;
    case KIR_U8: return g->t_i8;
    case KIR_I32:
    case KIR_U32: return g->t_i32;
    case KIR_F32: return g->t_f32;
    case KIR_F64: return g->t_f64;
    default: return g->t_i64;
    }
}

/* How a dtype is held in memory: f16 and bf16 as their bits, bool as a byte. */
LLVMTypeRef cg_mem_ty(cg_emit *g, burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F32: return g->t_f32;
    case BURNC_DTYPE_F64: return g->t_f64;
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return g->t_i16;
    case BURNC_DTYPE_I32: return g->t_i32;
    case BURNC_DTYPE_I64: return g->t_i64;
    default: return g->t_i8;
    }
}

unsigned cg_mem_align(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F64:
    case BURNC_DTYPE_I64: return 8;
    case BURNC_DTYPE_F32:
    case BURNC_DTYPE_I32: return 4;
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return 2;
    default: return 1;
    }
}

/* A float constant from its exact bits, so NaNs keep their payload. */
LLVMValueRef cg_kfp(cg_emit *g, int t, double v, int w)
{
    if (t == KIR_F32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        return ksplat(LLVMConstBitCast(LLVMConstInt(g->t_i32, u, 0), g->t_f32), w);
    }
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return ksplat(LLVMConstBitCast(LLVMConstInt(g->t_i64, u, 0), g->t_f64), w);
}

LLVMValueRef cg_call_intrinsic(cg_emit *g, const char *name, LLVMTypeRef *tys, int n_tys, LLVMValueRef *args,
                               int n_args)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, tys, (size_t)n_tys);
    LLVMTypeRef fty = LLVMIntrinsicGetType(g->ctx, id, tys, (size_t)n_tys);
    return LLVMBuildCall2(g->b, fty, fn, args, (unsigned)n_args, "");
}

LLVMValueRef cg_intrinsic1(cg_emit *g, const char *name, LLVMValueRef a)
{
    LLVMTypeRef t = LLVMTypeOf(a);
    return cg_call_intrinsic(g, name, &t, 1, &a, 1);
}

/* ---- f16 and bf16, in integer code ------------------------------------------------------- */

typedef struct fpfmt {
    int bits, mant, exp_bits, bias;
} fpfmt;

static const fpfmt FMT_F32 = {32, 23, 8, 127}, FMT_F64 = {64, 52, 11, 1023};
static const fpfmt FMT_F16 = {16, 10, 5, 15}, FMT_BF16 = {16, 7, 8, 127};

/* Rounds the float whose bits are x (format s) to format d, to nearest even, once: NaNs stay
 * quiet NaNs with the payload's top bits, overflow gives infinity, results below d's normal
 * range round at d's subnormal spacing. Returns d's 16 bits. Mirrors ir/dtype.c's
 * narrow_round, branch-free so that it vectorizes. */
static LLVMValueRef narrow_bits(cg_emit *g, LLVMValueRef x, fpfmt s, fpfmt d, int w)
{
    LLVMBuilderRef b = g->b;
    if (s.bits == 32 && d.exp_bits == 8) {
        /* f32 -> bf16, one exponent range: the general steps reduce to rounding the pattern at
         * bit 16 (subnormals, the carry into the exponent and overflow to inf fall out of it;
         * no sign carry short of NaN), and a NaN keeps its top bits, made quiet. Same bits in
         * a fifth of the instructions. */
        LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, x, kint(g->t_i32, 16, w), ""), kint(g->t_i32, 1, w), "");
        LLVMValueRef r = LLVMBuildAdd(b, LLVMBuildAdd(b, x, kint(g->t_i32, 0x7fff, w), ""), odd, "");
        LLVMValueRef nan = LLVMBuildOr(b, x, kint(g->t_i32, 0x400000, w), "");
        LLVMValueRef au = LLVMBuildAnd(b, x, kint(g->t_i32, 0x7fffffff, w), "");
        r = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGT, au, kint(g->t_i32, 0x7f800000, w), ""), nan, r, "");
        return LLVMBuildTrunc(b, LLVMBuildLShr(b, r, kint(g->t_i32, 16, w), ""), vty(g->t_i16, w), "");
    }
    LLVMTypeRef it = LLVMIntTypeInContext(g->ctx, (unsigned)s.bits);
    const uint64_t one = 1;
    int shift_d = s.mant - d.mant;
#define KS(v) kint(it, (uint64_t)(v), w)
    LLVMValueRef au = LLVMBuildAnd(b, x, KS((one << (s.bits - 1)) - 1), "");
    LLVMValueRef sign = LLVMBuildTrunc(b, LLVMBuildLShr(b, x, KS(s.bits - 16), ""), vty(g->t_i16, w), "");
    sign = LLVMBuildAnd(b, sign, kint(g->t_i16, 0x8000, w), "");

    uint64_t inf_s = ((one << s.exp_bits) - 1) << s.mant, inf_d = ((one << d.exp_bits) - 1) << d.mant;
    LLVMValueRef is_nan = LLVMBuildICmp(b, LLVMIntUGT, au, KS(inf_s), "");
    LLVMValueRef payload = LLVMBuildAnd(b, LLVMBuildLShr(b, au, KS(shift_d), ""), KS((one << d.mant) - 1), "");
    LLVMValueRef nan = LLVMBuildOr(b, payload, KS(inf_d | (one << (d.mant - 1))), "");

    int emax_d = (1 << d.exp_bits) - 2 - d.bias;
    uint64_t over = ((uint64_t)(emax_d + s.bias) << s.mant) | (((one << (d.mant + 1)) - 1) << (shift_d - 1));
    LLVMValueRef is_over = LLVMBuildICmp(b, LLVMIntUGE, au, KS(over), "");
    LLVMValueRef is_normal = LLVMBuildICmp(b, LLVMIntUGE, au, KS((uint64_t)(1 - d.bias + s.bias) << s.mant), "");

    /* Normal results: rebias, then round at bit shift_d (the carry may bump the exponent). */
    LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, au, KS(shift_d), ""), KS(1), "");
    LLVMValueRef nr = LLVMBuildSub(b, au, KS((uint64_t)(s.bias - d.bias) << s.mant), "");
    nr = LLVMBuildAdd(b, nr, KS((one << (shift_d - 1)) - 1), "");
    nr = LLVMBuildLShr(b, LLVMBuildAdd(b, nr, odd, ""), KS(shift_d), "");

    /* Subnormal results: the significand m times 2^(e - bias - mant), counted in units of d's
     * smallest subnormal, rounded at a variable shift (clamped: beyond it everything is 0). */
    LLVMValueRef e = LLVMBuildLShr(b, au, KS(s.mant), "");
    LLVMValueRef frac = LLVMBuildAnd(b, au, KS((one << s.mant) - 1), "");
    LLVMValueRef e0 = LLVMBuildICmp(b, LLVMIntEQ, e, KS(0), "");
    LLVMValueRef m = LLVMBuildSelect(b, e0, frac, LLVMBuildOr(b, frac, KS(one << s.mant), ""), "");
    LLVMValueRef eff = LLVMBuildSelect(b, e0, KS(1), e, "");
    int emin_sub = 1 - d.bias - d.mant;
    LLVMValueRef sh = LLVMBuildSub(b, KS(s.bias + s.mant + emin_sub), eff, "");
    /* Lanes outside this branch may compute any shift: keep it in [1, bits) so none is poison. */
    LLVMValueRef wild = LLVMBuildOr(b, LLVMBuildICmp(b, LLVMIntUGT, sh, KS(s.bits - 1), ""),
                                    LLVMBuildICmp(b, LLVMIntEQ, sh, KS(0), ""), "");
    sh = LLVMBuildSelect(b, wild, KS(s.bits - 1), sh, "");
    LLVMValueRef n = LLVMBuildLShr(b, m, sh, "");
    LLVMValueRef rem = LLVMBuildAnd(b, m, LLVMBuildSub(b, LLVMBuildShl(b, KS(1), sh, ""), KS(1), ""), "");
    LLVMValueRef half = LLVMBuildShl(b, KS(1), LLVMBuildSub(b, sh, KS(1), ""), "");
    LLVMValueRef tie_odd = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, rem, half, ""),
                                        LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, n, KS(1), ""), KS(0), ""), "");
    LLVMValueRef up = LLVMBuildOr(b, LLVMBuildICmp(b, LLVMIntUGT, rem, half, ""), tie_odd, "");
    LLVMValueRef sub = LLVMBuildAdd(b, n, LLVMBuildZExt(b, up, vty(it, w), ""), "");

    LLVMValueRef r = LLVMBuildSelect(b, is_normal, nr, sub, "");
    r = LLVMBuildSelect(b, is_over, KS(inf_d), r, "");
    r = LLVMBuildSelect(b, is_nan, nan, r, "");
#undef KS
    return LLVMBuildOr(b, LLVMBuildTrunc(b, r, vty(g->t_i16, w), ""), sign, "");
}

/* f16 bits -> f32, exactly (subnormals through an exact multiply). */
static LLVMValueRef widen_f16(cg_emit *g, LLVMValueRef h, int w)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef it = vty(g->t_i32, w);
    LLVMValueRef x = LLVMBuildZExt(b, h, it, "");
    LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildAnd(b, x, kint(g->t_i32, 0x8000, w), ""), kint(g->t_i32, 16, w), "");
    LLVMValueRef e = LLVMBuildAnd(b, LLVMBuildLShr(b, x, kint(g->t_i32, 10, w), ""), kint(g->t_i32, 0x1f, w), "");
    LLVMValueRef f = LLVMBuildAnd(b, x, kint(g->t_i32, 0x3ff, w), "");
    LLVMValueRef f13 = LLVMBuildShl(b, f, kint(g->t_i32, 13, w), "");
    LLVMValueRef normal = LLVMBuildOr(
        b, LLVMBuildShl(b, LLVMBuildAdd(b, e, kint(g->t_i32, 127 - 15, w), ""), kint(g->t_i32, 23, w), ""), f13, "");
    LLVMValueRef special = LLVMBuildOr(b, f13, kint(g->t_i32, 0x7f800000, w), "");
    LLVMValueRef subf =
        LLVMBuildFMul(b, LLVMBuildUIToFP(b, f, vty(g->t_f32, w), ""), cg_kfp(g, KIR_F32, 0x1p-24, w), "");
    LLVMValueRef subn = LLVMBuildBitCast(b, subf, it, "");
    LLVMValueRef r = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, e, kint(g->t_i32, 31, w), ""), special, normal, "");
    r = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, e, kint(g->t_i32, 0, w), ""), subn, r, "");
    return LLVMBuildBitCast(b, LLVMBuildOr(b, r, sign, ""), vty(g->t_f32, w), "");
}

static LLVMValueRef widen_bf16(cg_emit *g, LLVMValueRef h, int w)
{
    LLVMValueRef x = LLVMBuildZExt(g->b, h, vty(g->t_i32, w), "");
    x = LLVMBuildShl(g->b, x, kint(g->t_i32, 16, w), "");
    return LLVMBuildBitCast(g->b, x, vty(g->t_f32, w), "");
}

/* An integer of type t -> f16/bf16 bits, rounded once from the exact value: 64-bit
 * magnitudes are first cut to 53 bits with a sticky bit (round to odd), which the second
 * rounding to at most 11 bits cannot tell from the exact value. */
static LLVMValueRef narrow_from_int(cg_emit *g, LLVMValueRef v, int t, fpfmt d, int w)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef dt = vty(g->t_f64, w), it = vty(g->t_i64, w);
    LLVMValueRef x;
    if (t_bits(t) <= 32) {
        x = t_sint(t) ? LLVMBuildSIToFP(b, v, dt, "") : LLVMBuildUIToFP(b, v, dt, "");
    } else {
        LLVMValueRef neg = t_sint(t) ? LLVMBuildICmp(b, LLVMIntSLT, v, kint(g->t_i64, 0, w), "") : NULL;
        LLVMValueRef mag = neg ? LLVMBuildSelect(b, neg, LLVMBuildSub(b, kint(g->t_i64, 0, w), v, ""), v, "") : v;
        LLVMValueRef ctlz_args[2] = {mag, kint(g->t_i1, 0, 1)};
        LLVMValueRef lz = cg_call_intrinsic(g, "llvm.ctlz", &it, 1, ctlz_args, 2);
        LLVMValueRef sh = LLVMBuildSub(b, kint(g->t_i64, 64 - 53, w), lz, "");
        sh = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, sh, kint(g->t_i64, 0, w), ""), sh, kint(g->t_i64, 0, w),
                             "");
        LLVMValueRef lost = LLVMBuildAnd(
            b, mag, LLVMBuildSub(b, LLVMBuildShl(b, kint(g->t_i64, 1, w), sh, ""), kint(g->t_i64, 1, w), ""), "");
        LLVMValueRef sticky = LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntNE, lost, kint(g->t_i64, 0, w), ""), it, "");
        LLVMValueRef m = LLVMBuildOr(b, LLVMBuildLShr(b, mag, sh, ""), sticky, "");
        LLVMValueRef scale =
            LLVMBuildShl(b, LLVMBuildAdd(b, sh, kint(g->t_i64, 1023, w), ""), kint(g->t_i64, 52, w), "");
        x = LLVMBuildFMul(b, LLVMBuildUIToFP(b, m, dt, ""), LLVMBuildBitCast(b, scale, dt, ""), "");
        if (neg)
            x = LLVMBuildSelect(b, neg, LLVMBuildFNeg(b, x, ""), x, "");
    }
    return narrow_bits(g, LLVMBuildBitCast(b, x, it, ""), FMT_F64, d, w);
}

/* A value of type t -> what a dt slot holds, rounded once. */
LLVMValueRef cg_to_mem(cg_emit *g, LLVMValueRef v, int t, burnc_dtype_t dt, int w)
{
    if (dt_narrow(dt)) {
        fpfmt d = dt == BURNC_DTYPE_F16 ? FMT_F16 : FMT_BF16;
        if (t == KIR_F32)
            return narrow_bits(g, LLVMBuildBitCast(g->b, v, vty(g->t_i32, w), ""), FMT_F32, d, w);
        if (t == KIR_F64)
            return narrow_bits(g, LLVMBuildBitCast(g->b, v, vty(g->t_i64, w), ""), FMT_F64, d, w);
        return narrow_from_int(g, v, t, d, w);
    }
    if (dt == BURNC_DTYPE_BOOL)
        return LLVMBuildZExt(g->b, v, vty(g->t_i8, w), "");
    return v;
}

/* What a dt slot holds -> the value a load gives (kernel.h: widened; bool as 0 or 1). */
LLVMValueRef cg_from_mem(cg_emit *g, LLVMValueRef raw, burnc_dtype_t dt, int w)
{
    switch (dt) {
    case BURNC_DTYPE_F16: return widen_f16(g, raw, w);
    case BURNC_DTYPE_BF16: return widen_bf16(g, raw, w);
    case BURNC_DTYPE_BOOL: return LLVMBuildICmp(g->b, LLVMIntNE, raw, kint(g->t_i8, 0, w), "");
    default: return raw;
    }
}

/* ---- Operations -------------------------------------------------------------------------- */

/* Float -> integer with kernel.h's saturation, branch-free so that it stays vectorized
 * (llvm.fptosi.sat is scalarized on x86): the value is clamped into [lo, hi], the range of
 * floats whose truncation fits, truncated, and then values above hi give the type's maximum
 * (hi is below it when the maximum is not a float) and NaN gives 0. */
static LLVMValueRef float_to_int(cg_emit *g, LLVMValueRef a, int from, int to, LLVMTypeRef rt, int w)
{
    LLVMBuilderRef b = g->b;
    int bits = t_bits(to);
    bool s = t_sint(to);
    double lo = s ? -ldexp(1.0, bits - 1) : 0.0, top = ldexp(1.0, s ? bits - 1 : bits); /* max + 1 */
    double hi = from == KIR_F32 ? (double)nextafterf((float)top, 0.0f) : nextafter(top, 0.0);
    if (top - 1 < hi) /* max + 1 - 1 rounds only when the maximum is no float of this width */
        hi = top - 1;
    LLVMValueRef vlo = cg_kfp(g, from, lo, w), vhi = cg_kfp(g, from, hi, w);
    LLVMValueRef c = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, a, vlo, ""), vlo, a, "");
    c = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, c, vhi, ""), vhi, c, "");
    c = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, a, a, ""), cg_kfp(g, from, 0.0, w), c, "");
    LLVMValueRef r = s ? LLVMBuildFPToSI(b, c, rt, "") : LLVMBuildFPToUI(b, c, rt, "");
    uint64_t max = s ? (UINT64_C(1) << (bits - 1)) - 1 : bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, a, vhi, ""), kint(cg_ty_of(g, to), max, w), r, "");
}

static LLVMValueRef convert(cg_emit *g, LLVMValueRef a, int from, int to, int w)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef rt = vty(cg_ty_of(g, to), w);
    if (from == to)
        return a;
    if (t_fp(from)) {
        if (to == KIR_F64)
            return LLVMBuildFPExt(b, a, rt, "");
        if (to == KIR_F32)
            return LLVMBuildFPTrunc(b, a, rt, "");
        if (to == KIR_BOOL)
            return LLVMBuildFCmp(b, LLVMRealUNE, a, cg_kfp(g, from, 0.0, w), ""); /* NaN is true */
        return float_to_int(g, a, from, to, rt, w);
    }
    if (t_fp(to))
        return t_sint(from) ? LLVMBuildSIToFP(b, a, rt, "") : LLVMBuildUIToFP(b, a, rt, "");
    if (to == KIR_BOOL)
        return LLVMBuildICmp(b, LLVMIntNE, a, LLVMConstNull(LLVMTypeOf(a)), "");
    int fb = t_bits(from), tb = t_bits(to);
    if (tb < fb)
        return LLVMBuildTrunc(b, a, rt, "");
    if (tb > fb)
        return t_sint(from) ? LLVMBuildSExt(b, a, rt, "") : LLVMBuildZExt(b, a, rt, "");
    return a;
}

/* Floor division and remainder with kernel.h's edges: a zero divisor gives 0, MIN / -1 wraps
 * (remainder 0). The divisor is made safe first so no lane ever traps. */
static LLVMValueRef int_divrem(cg_emit *g, bool rem, int t, LLVMValueRef a, LLVMValueRef d, int w)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef et = cg_ty_of(g, t);
    LLVMValueRef zero = kint(et, 0, w), onek = kint(et, 1, w);
    LLVMValueRef dz = LLVMBuildICmp(b, LLVMIntEQ, d, zero, "");
    if (!t_sint(t)) {
        LLVMValueRef ds = LLVMBuildSelect(b, dz, onek, d, "");
        LLVMValueRef r = rem ? LLVMBuildURem(b, a, ds, "") : LLVMBuildUDiv(b, a, ds, "");
        return LLVMBuildSelect(b, dz, zero, r, "");
    }
    LLVMValueRef dm1 = LLVMBuildICmp(b, LLVMIntEQ, d, LLVMConstAllOnes(vty(et, w)), "");
    LLVMValueRef odd = LLVMBuildOr(b, dz, dm1, "");
    LLVMValueRef ds = LLVMBuildSelect(b, odd, onek, d, "");
    LLVMValueRef r = LLVMBuildSRem(b, a, ds, "");
    LLVMValueRef adj = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntNE, r, zero, ""),
                                    LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildXor(b, r, ds, ""), zero, ""), "");
    if (rem) {
        r = LLVMBuildSelect(b, adj, LLVMBuildAdd(b, r, ds, ""), r, "");
        return LLVMBuildSelect(b, odd, zero, r, "");
    }
    LLVMValueRef q = LLVMBuildSub(b, LLVMBuildSDiv(b, a, ds, ""), LLVMBuildZExt(b, adj, vty(et, w), ""), "");
    q = LLVMBuildSelect(b, dm1, LLVMBuildSub(b, zero, a, ""), q, "");
    return LLVMBuildSelect(b, dz, zero, q, "");
}

/* The high half of a product, from 32-bit halves for u64 (no i128 vectors). */
static LLVMValueRef mulhi(cg_emit *g, int t, LLVMValueRef a, LLVMValueRef c, int w)
{
    LLVMBuilderRef b = g->b;
    if (t == KIR_U32) {
        LLVMTypeRef wt = vty(g->t_i64, w);
        LLVMValueRef p = LLVMBuildMul(b, LLVMBuildZExt(b, a, wt, ""), LLVMBuildZExt(b, c, wt, ""), "");
        return LLVMBuildTrunc(b, LLVMBuildLShr(b, p, kint(g->t_i64, 32, w), ""), vty(g->t_i32, w), "");
    }
    LLVMValueRef lo = kint(g->t_i64, 0xffffffffu, w), s32 = kint(g->t_i64, 32, w);
    LLVMValueRef al = LLVMBuildAnd(b, a, lo, ""), ah = LLVMBuildLShr(b, a, s32, "");
    LLVMValueRef bl = LLVMBuildAnd(b, c, lo, ""), bh = LLVMBuildLShr(b, c, s32, "");
    LLVMValueRef ll = LLVMBuildMul(b, al, bl, ""), lh = LLVMBuildMul(b, al, bh, "");
    LLVMValueRef hl = LLVMBuildMul(b, ah, bl, ""), hh = LLVMBuildMul(b, ah, bh, "");
    LLVMValueRef mid = LLVMBuildAdd(b, LLVMBuildLShr(b, ll, s32, ""), LLVMBuildAnd(b, lh, lo, ""), "");
    mid = LLVMBuildAdd(b, mid, LLVMBuildAnd(b, hl, lo, ""), "");
    LLVMValueRef r = LLVMBuildAdd(b, hh, LLVMBuildLShr(b, lh, s32, ""), "");
    r = LLVMBuildAdd(b, r, LLVMBuildLShr(b, hl, s32, ""), "");
    return LLVMBuildAdd(b, r, LLVMBuildLShr(b, mid, s32, ""), "");
}

LLVMValueRef cg_compare(cg_emit *g, int op, int t, LLVMValueRef a, LLVMValueRef c)
{
    if (t_fp(t)) {
        static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                               LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
        return LLVMBuildFCmp(g->b, fp[op - KIR_EQ], a, c, "");
    }
    static const LLVMIntPredicate s[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
    static const LLVMIntPredicate u[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
    return LLVMBuildICmp(g->b, t_sint(t) ? s[op - KIR_EQ] : u[op - KIR_EQ], a, c, "");
}

LLVMValueRef cg_unary(cg_emit *g, const kir_inst *in, int ta, LLVMValueRef a, int w)
{
    LLVMBuilderRef b = g->b;
    int t = in->type;
    switch (in->op) {
    case KIR_NEG: return t_fp(t) ? LLVMBuildFNeg(b, a, "") : LLVMBuildSub(b, kint(cg_ty_of(g, t), 0, w), a, "");
    case KIR_ABS:
        if (t_fp(t))
            return cg_intrinsic1(g, "llvm.fabs", a);
        if (!t_sint(t))
            return a;
        return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, a, kint(cg_ty_of(g, t), 0, w), ""),
                               LLVMBuildSub(b, kint(cg_ty_of(g, t), 0, w), a, ""), a, "");
    case KIR_SQRT: return cg_intrinsic1(g, "llvm.sqrt", a);
    case KIR_FLOOR: return cg_intrinsic1(g, "llvm.floor", a);
    case KIR_CEIL: return cg_intrinsic1(g, "llvm.ceil", a);
    case KIR_TRUNC: return cg_intrinsic1(g, "llvm.trunc", a);
    case KIR_RINT: return cg_intrinsic1(g, "llvm.roundeven", a);
    case KIR_NOT: return LLVMBuildNot(b, a, "");
    case KIR_CONVERT: return convert(g, a, ta, t, w);
    case KIR_BITCAST: return LLVMBuildBitCast(b, a, vty(cg_ty_of(g, t), w), "");
    default: { /* KIR_ROUND */
        fpfmt d = in->imm.i == KIR_F16 ? FMT_F16 : FMT_BF16;
        LLVMValueRef h = narrow_bits(g, LLVMBuildBitCast(b, a, vty(g->t_i32, w), ""), FMT_F32, d, w);
        return in->imm.i == KIR_F16 ? widen_f16(g, h, w) : widen_bf16(g, h, w);
    }
    }
}

LLVMValueRef cg_binary(cg_emit *g, int op, int t, LLVMValueRef a, LLVMValueRef c, int w)
{
    LLVMBuilderRef b = g->b;
    bool fp = t_fp(t);
    switch (op) {
    case KIR_ADD: return fp ? LLVMBuildFAdd(b, a, c, "") : LLVMBuildAdd(b, a, c, "");
    case KIR_SUB: return fp ? LLVMBuildFSub(b, a, c, "") : LLVMBuildSub(b, a, c, "");
    case KIR_MUL: return fp ? LLVMBuildFMul(b, a, c, "") : LLVMBuildMul(b, a, c, "");
    case KIR_DIV: return fp ? LLVMBuildFDiv(b, a, c, "") : int_divrem(g, false, t, a, c, w);
    case KIR_REM: return fp ? LLVMBuildFRem(b, a, c, "") : int_divrem(g, true, t, a, c, w); /* frem is fmod */
    case KIR_MULHI: return mulhi(g, t, a, c, w);
    case KIR_AND: return LLVMBuildAnd(b, a, c, "");
    case KIR_OR: return LLVMBuildOr(b, a, c, "");
    case KIR_XOR: return LLVMBuildXor(b, a, c, "");
    default: { /* shifts: the count modulo the width */
        LLVMValueRef n = LLVMBuildAnd(b, c, kint(cg_ty_of(g, t), (uint64_t)(t_bits(t) - 1), w), "");
        if (op == KIR_SHL)
            return LLVMBuildShl(b, a, n, "");
        return t_sint(t) ? LLVMBuildAShr(b, a, n, "") : LLVMBuildLShr(b, a, n, "");
    }
    }
}

/* ---- Reductions: identities and combining ------------------------------------------------ */

LLVMValueRef cg_identity(cg_emit *g, int comb, int t, int w)
{
    bool fp = t_fp(t);
    LLVMTypeRef et = cg_ty_of(g, t);
    switch (comb) {
    case KIR_COMBINE_SUM: return fp ? cg_kfp(g, t, 0.0, w) : kint(et, 0, w);
    case KIR_COMBINE_PROD: return fp ? cg_kfp(g, t, 1.0, w) : kint(et, 1, w);
    case KIR_COMBINE_MAX:
    case KIR_COMBINE_ARGMAX:
        if (fp)
            return cg_kfp(g, t, -__builtin_inf(), w);
        return t_sint(t) ? kint(et, UINT64_C(1) << (t_bits(t) - 1), w) : kint(et, 0, w);
    default:
        if (fp)
            return cg_kfp(g, t, __builtin_inf(), w);
        return t_sint(t) ? kint(et, (UINT64_C(1) << (t_bits(t) - 1)) - 1, w) : ksplat(LLVMConstAllOnes(et), w);
    }
}

/* l (lower lanes or leaves, or the running value) combined with r, as kir_eval does: MAX is
 * (l > r || isnan(l)) ? l : r; ARG* takes r when it beats l (a NaN beats a number, the
 * larger (smaller) value wins, ties go to the lower position). */
void cg_combine(cg_emit *g, int comb, int t, LLVMValueRef lv, LLVMValueRef lp, LLVMValueRef rv, LLVMValueRef rp,
                LLVMValueRef *ov, LLVMValueRef *op)
{
    LLVMBuilderRef b = g->b;
    bool fp = t_fp(t);
    switch (comb) {
    case KIR_COMBINE_SUM: *ov = fp ? LLVMBuildFAdd(b, lv, rv, "") : LLVMBuildAdd(b, lv, rv, ""); return;
    case KIR_COMBINE_PROD: *ov = fp ? LLVMBuildFMul(b, lv, rv, "") : LLVMBuildMul(b, lv, rv, ""); return;
    case KIR_COMBINE_MAX:
    case KIR_COMBINE_MIN: {
        LLVMValueRef keep = cg_compare(g, comb == KIR_COMBINE_MAX ? KIR_GT : KIR_LT, t, lv, rv);
        if (fp)
            keep = LLVMBuildOr(b, keep, LLVMBuildFCmp(b, LLVMRealUNO, lv, lv, ""), "");
        *ov = LLVMBuildSelect(b, keep, lv, rv, "");
        return;
    }
    default: {
        LLVMValueRef lower = LLVMBuildICmp(b, LLVMIntSLT, rp, lp, "");
        LLVMValueRef wins = cg_compare(g, comb == KIR_COMBINE_ARGMAX ? KIR_GT : KIR_LT, t, rv, lv);
        LLVMValueRef tie = LLVMBuildAnd(b, cg_compare(g, KIR_EQ, t, lv, rv), lower, "");
        LLVMValueRef better = LLVMBuildOr(b, wins, tie, "");
        if (fp) {
            LLVMValueRef ln = LLVMBuildFCmp(b, LLVMRealUNO, lv, lv, ""), rn = LLVMBuildFCmp(b, LLVMRealUNO, rv, rv, "");
            LLVMValueRef nan_case = LLVMBuildAnd(b, rn, LLVMBuildOr(b, LLVMBuildNot(b, ln, ""), lower, ""), "");
            better = LLVMBuildSelect(b, LLVMBuildOr(b, ln, rn, ""), nan_case, better, "");
        }
        *ov = LLVMBuildSelect(b, better, rv, lv, "");
        *op = LLVMBuildSelect(b, better, rp, lp, "");
        return;
    }
    }
}
