/* The per-instruction lowering of the kernel IR to LLVM IR that the CPU (llvm_cpu.c) and PTX
 * (llvm_ptx.c) generators share, so that both give every instruction the same semantics:
 * types, constants, f16/bf16 conversions in integer code, burnc's casts, floor division and
 * remainder, compares, reduction identities and combining. Internal to the burnc-llvm module.
 *
 * Every function builds at g->b's position; `w` is a vector width (1: scalars). */
#ifndef BURNC_LLVM_EMIT_H
#define BURNC_LLVM_EMIT_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

/* What the shared lowering needs of a generator's state (each generator embeds one). */
typedef struct cg_emit {
    const kir_kernel *k;
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef t_void, t_i1, t_i8, t_i16, t_i32, t_i64, t_f32, t_f64, t_ptr;
} cg_emit;

/* ---- Type facts (kernel.h; libburnc's helpers are not visible from the module) ----------- */

static inline bool t_fp(int t) { return t == KIR_F32 || t == KIR_F64; }
static inline bool t_sint(int t) { return t == KIR_I32 || t == KIR_I64; }
static inline bool t_value(int t) { return t >= KIR_BOOL && t <= KIR_F64; }

static inline int t_bits(int t)
{
    switch (t) {
    case KIR_BOOL: return 1;
    case KIR_U8: return 8;
    case KIR_I32:
    case KIR_U32:
    case KIR_F32: return 32;
    default: return 64;
    }
}

static inline bool dt_valid(burnc_dtype_t dt) { return dt >= BURNC_DTYPE_F32 && dt <= BURNC_DTYPE_BOOL; }

/* The value type a load of dt gives. */
static inline int dt_type(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F64: return KIR_F64;
    case BURNC_DTYPE_I32: return KIR_I32;
    case BURNC_DTYPE_I64: return KIR_I64;
    case BURNC_DTYPE_U8: return KIR_U8;
    case BURNC_DTYPE_BOOL: return KIR_BOOL;
    default: return KIR_F32; /* f32, f16, bf16 */
    }
}

static inline bool dt_narrow(burnc_dtype_t dt) { return dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16; }
static inline bool is_arg_comb(int c) { return c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN; }

/* ---- Types and constants ------------------------------------------------------------------ */

static inline LLVMTypeRef vty(LLVMTypeRef e, int w) { return w > 1 ? LLVMVectorType(e, (unsigned)w) : e; }

static inline LLVMValueRef ksplat(LLVMValueRef s, int w)
{
    if (w == 1)
        return s;
    LLVMValueRef a[KIR_LANES];
    for (int i = 0; i < w; i++)
        a[i] = s;
    return LLVMConstVector(a, (unsigned)w);
}

static inline LLVMValueRef kint(LLVMTypeRef e, uint64_t v, int w) { return ksplat(LLVMConstInt(e, v, 0), w); }

/* Fills g's types from g->ctx. */
void cg_emit_types(cg_emit *g);
/* A new context, module `name` (for tm's data layout and triple) and builder in g, and their
 * types. */
void cg_module_begin(cg_emit *g, LLVMTargetMachineRef tm, const char *triple, const char *name);
/* Disposes what cg_module_begin made, and tm. */
void cg_module_end(cg_emit *g, LLVMTargetMachineRef tm);
/* kir_valid's rules that the generators rely on; false with a message that starts with what. */
bool cg_check_kernel(const kir_kernel *k, const char *what, char *err, size_t cap);
/* A value type's LLVM type; how a dtype is held in memory (f16/bf16 as i16, bool as i8). */
LLVMTypeRef cg_ty_of(cg_emit *g, int t);
LLVMTypeRef cg_mem_ty(cg_emit *g, burnc_dtype_t dt);
unsigned cg_mem_align(burnc_dtype_t dt);
/* A float constant of type t from its exact bits (NaNs keep their payload). */
LLVMValueRef cg_kfp(cg_emit *g, int t, double v, int w);
LLVMValueRef cg_call_intrinsic(cg_emit *g, const char *name, LLVMTypeRef *tys, int n_tys, LLVMValueRef *args,
                               int n_args);
LLVMValueRef cg_intrinsic1(cg_emit *g, const char *name, LLVMValueRef a);

/* ---- Control flow ------------------------------------------------------------------------- */

/* if (cond) { ... }: leaves the builder in the body (a block named name) and returns the block
 * the branch joins, which cg_if_end closes the body into. */
static inline LLVMBasicBlockRef cg_if_begin(cg_emit *g, LLVMValueRef cond, const char *name)
{
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(g->b));
    LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(g->ctx, fn, name);
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->ctx, fn, "endif");
    LLVMBuildCondBr(g->b, cond, yes, join);
    LLVMPositionBuilderAtEnd(g->b, yes);
    return join;
}

static inline void cg_if_end(cg_emit *g, LLVMBasicBlockRef join)
{
    LLVMBuildBr(g->b, join);
    LLVMPositionBuilderAtEnd(g->b, join);
}

/* ---- Values ------------------------------------------------------------------------------- */

/* A value of type t -> what a dt slot holds, rounded once; and back (kernel.h's loads). */
LLVMValueRef cg_to_mem(cg_emit *g, LLVMValueRef v, int t, burnc_dtype_t dt, int w);
LLVMValueRef cg_from_mem(cg_emit *g, LLVMValueRef raw, burnc_dtype_t dt, int w);
/* KIR_EQ..KIR_GE on operands of type t. */
LLVMValueRef cg_compare(cg_emit *g, int op, int t, LLVMValueRef a, LLVMValueRef c);
/* The unary instruction in (operand a of type ta) and the binary op on type t, except compares
 * (cg_compare). Float KIR_REM is LLVM's frem, which is exact C fmod on the CPU only. */
LLVMValueRef cg_unary(cg_emit *g, const kir_inst *in, int ta, LLVMValueRef a, int w);
LLVMValueRef cg_binary(cg_emit *g, int op, int t, LLVMValueRef a, LLVMValueRef c, int w);

/* ---- Reductions --------------------------------------------------------------------------- */

/* The combiner's identity (kernel.h; ARG combiners: the value part). */
LLVMValueRef cg_identity(cg_emit *g, int comb, int t, int w);
/* l combined with r as kir_eval does (lp, rp: positions, ARG combiners only; else ignored and
 * *op untouched). */
void cg_combine(cg_emit *g, int comb, int t, LLVMValueRef lv, LLVMValueRef lp, LLVMValueRef rv, LLVMValueRef rp,
                LLVMValueRef *ov, LLVMValueRef *op);

#endif
