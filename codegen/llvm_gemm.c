/* The matmul micro-kernel, generated through LLVM for the host (part of the burnc-llvm module;
 * cg.h states the contract, runtime/cpu/gemm.c drives it).
 *
 * One function, CG_SYM_GEMM(kc, a, b, c, ldc, accumulate): mr x nr accumulators held in vector
 * registers (mr rows, nr / lanes vectors per row), a loop over k that loads the nr values of
 * b's step k as vectors, broadcasts each of the mr values of a's step k and adds one explicit
 * llvm.fma per accumulator. Every accumulator lane is one element of C, so each element gets
 * exactly one fma per k in increasing k: the numerics burnc_matmul promises (include/burnc.h).
 * No fast-math flags, so LLVM may not reassociate or split the chains.
 *
 * The k loop is unrolled by hand (UNROLL steps per iteration, then a loop of single steps for
 * the rest), which keeps the loop's shape out of the optimizer's hands. The result is emitted
 * as a relocatable object that the runtime maps with cg_object_load, the same way as a kernel
 * from the disk cache: no JIT session is needed for it. */
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "codegen/llvm_host.h"

enum { UNROLL = 4, MAX_ACC = 64 };

typedef struct ukgen {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef t_i64, t_ptr, t_el, t_vec;
    LLVMValueRef fn, fma;
    LLVMTypeRef fma_ty;
    int mr, nr, lanes, nv; /* nv: vectors per row */
    LLVMValueRef a, b_ptr, c, ldc;
} ukgen;

static LLVMValueRef gep(ukgen *g, LLVMValueRef base, LLVMValueRef idx)
{
    return LLVMBuildGEP2(g->b, g->t_el, base, &idx, 1, "");
}

static LLVMValueRef k64(ukgen *g, int64_t v) { return LLVMConstInt(g->t_i64, (unsigned long long)v, 1); }

static LLVMValueRef load(ukgen *g, LLVMTypeRef t, LLVMValueRef p)
{
    LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
    LLVMSetAlignment(v, (unsigned)LLVMABISizeOfType(LLVMGetModuleDataLayout(g->mod), g->t_el));
    return v;
}

/* One step k (a and b point at the step's packed values): acc[i][v] = fma(a[i], b[v], acc). */
static void step(ukgen *g, LLVMValueRef pa, LLVMValueRef pb, LLVMValueRef *acc)
{
    LLVMValueRef bv[MAX_ACC];
    for (int v = 0; v < g->nv; v++)
        bv[v] = load(g, g->t_vec, gep(g, pb, k64(g, (int64_t)v * g->lanes)));
    for (int i = 0; i < g->mr; i++) {
        LLVMValueRef s = load(g, g->t_el, gep(g, pa, k64(g, i)));
        LLVMValueRef sv = s;
        if (g->lanes > 1) {
            LLVMValueRef ins = LLVMBuildInsertElement(g->b, LLVMGetUndef(g->t_vec), s, k64(g, 0), "");
            sv = LLVMBuildShuffleVector(g->b, ins, LLVMGetUndef(g->t_vec),
                                        LLVMConstNull(LLVMVectorType(LLVMInt32TypeInContext(g->ctx),
                                                                     (unsigned)g->lanes)),
                                        "");
        }
        for (int v = 0; v < g->nv; v++) {
            LLVMValueRef args[3] = {sv, bv[v], acc[i * g->nv + v]};
            acc[i * g->nv + v] = LLVMBuildCall2(g->b, g->fma_ty, g->fma, args, 3, "");
        }
    }
}

/* A counted loop over [0, n) that carries the accumulators; steps `per` k per iteration from
 * the packed pointers pa, pb (advanced by per * mr and per * nr). Returns through acc and the
 * pointers the values after the loop. */
static void acc_loop(ukgen *g, LLVMValueRef n, int per, LLVMValueRef *pa, LLVMValueRef *pb, LLVMValueRef *acc,
                     const char *name)
{
    int na = g->mr * g->nv;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->ctx, g->fn, name);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
    LLVMBuildBr(g->b, head);
    LLVMPositionBuilderAtEnd(g->b, head);
    LLVMValueRef i = LLVMBuildPhi(g->b, g->t_i64, "i");
    LLVMValueRef qa = LLVMBuildPhi(g->b, g->t_ptr, "pa"), qb = LLVMBuildPhi(g->b, g->t_ptr, "pb");
    LLVMValueRef phis[MAX_ACC];
    for (int x = 0; x < na; x++)
        phis[x] = LLVMBuildPhi(g->b, g->t_vec, "");
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, i, n, ""), body, done);
    LLVMPositionBuilderAtEnd(g->b, body);
    LLVMValueRef cur[MAX_ACC];
    memcpy(cur, phis, (size_t)na * sizeof *cur);
    for (int u = 0; u < per; u++)
        step(g, gep(g, qa, k64(g, (int64_t)u * g->mr)), gep(g, qb, k64(g, (int64_t)u * g->nr)), cur);
    LLVMValueRef i1 = LLVMBuildAdd(g->b, i, k64(g, 1), "");
    LLVMValueRef qa1 = gep(g, qa, k64(g, (int64_t)per * g->mr)), qb1 = gep(g, qb, k64(g, (int64_t)per * g->nr));
    LLVMBasicBlockRef end = LLVMGetInsertBlock(g->b);
    LLVMBuildBr(g->b, head);
    LLVMValueRef zero = k64(g, 0);
    LLVMAddIncoming(i, (LLVMValueRef[]){zero, i1}, (LLVMBasicBlockRef[]){pre, end}, 2);
    LLVMAddIncoming(qa, (LLVMValueRef[]){*pa, qa1}, (LLVMBasicBlockRef[]){pre, end}, 2);
    LLVMAddIncoming(qb, (LLVMValueRef[]){*pb, qb1}, (LLVMBasicBlockRef[]){pre, end}, 2);
    for (int x = 0; x < na; x++)
        LLVMAddIncoming(phis[x], (LLVMValueRef[]){acc[x], cur[x]}, (LLVMBasicBlockRef[]){pre, end}, 2);
    LLVMPositionBuilderAtEnd(g->b, done);
    memcpy(acc, phis, (size_t)na * sizeof *acc);
    *pa = qa;
    *pb = qb;
}

static LLVMValueRef c_row(ukgen *g, int i, int v)
{
    LLVMValueRef off = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, g->ldc, k64(g, i), ""), k64(g, (int64_t)v * g->lanes), "");
    return gep(g, g->c, off);
}

static void build(ukgen *g)
{
    LLVMTypeRef params[6] = {g->t_i64, g->t_ptr, g->t_ptr, g->t_ptr, g->t_i64, g->t_i64};
    LLVMTypeRef fty = LLVMFunctionType(LLVMVoidTypeInContext(g->ctx), params, 6, 0);
    g->fn = LLVMAddFunction(g->mod, CG_SYM_GEMM, fty);
    LLVMValueRef kc = LLVMGetParam(g->fn, 0);
    g->a = LLVMGetParam(g->fn, 1);
    g->b_ptr = LLVMGetParam(g->fn, 2);
    g->c = LLVMGetParam(g->fn, 3);
    g->ldc = LLVMGetParam(g->fn, 4);
    LLVMValueRef accumulate = LLVMGetParam(g->fn, 5);
    /* the packed operands and C never overlap */
    unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
    for (unsigned p = 2; p <= 4; p++)
        LLVMAddAttributeAtIndex(g->fn, p, LLVMCreateEnumAttribute(g->ctx, noalias, 0));
    const char *fname = g->lanes > 1 ? (LLVMGetTypeKind(g->t_el) == LLVMFloatTypeKind ? "llvm.fma.v%df32" : "llvm.fma.v%df64")
                                     : (LLVMGetTypeKind(g->t_el) == LLVMFloatTypeKind ? "llvm.fma.f32" : "llvm.fma.f64");
    char name[32];
    snprintf(name, sizeof name, fname, g->lanes);
    LLVMTypeRef fp[3] = {g->t_vec, g->t_vec, g->t_vec};
    g->fma_ty = LLVMFunctionType(g->t_vec, fp, 3, 0);
    g->fma = LLVMAddFunction(g->mod, name, g->fma_ty);

    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "entry");
    LLVMBasicBlockRef ld = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "load_c");
    LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "go");
    LLVMPositionBuilderAtEnd(g->b, entry);
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntNE, accumulate, k64(g, 0), ""), ld, go);
    int na = g->mr * g->nv;
    LLVMValueRef loaded[MAX_ACC], acc[MAX_ACC];
    LLVMPositionBuilderAtEnd(g->b, ld);
    for (int i = 0; i < g->mr; i++)
        for (int v = 0; v < g->nv; v++)
            loaded[i * g->nv + v] = load(g, g->t_vec, c_row(g, i, v));
    LLVMBuildBr(g->b, go);
    LLVMPositionBuilderAtEnd(g->b, go);
    LLVMValueRef zero = LLVMConstNull(g->t_vec); /* +0.0 in every lane */
    for (int x = 0; x < na; x++) {
        acc[x] = LLVMBuildPhi(g->b, g->t_vec, "");
        LLVMAddIncoming(acc[x], (LLVMValueRef[]){zero, loaded[x]}, (LLVMBasicBlockRef[]){entry, ld}, 2);
    }
    LLVMValueRef pa = g->a, pb = g->b_ptr;
    acc_loop(g, LLVMBuildSDiv(g->b, kc, k64(g, UNROLL), ""), UNROLL, &pa, &pb, acc, "unrolled");
    acc_loop(g, LLVMBuildSRem(g->b, kc, k64(g, UNROLL), ""), 1, &pa, &pb, acc, "rest");
    for (int i = 0; i < g->mr; i++)
        for (int v = 0; v < g->nv; v++) {
            LLVMValueRef st = LLVMBuildStore(g->b, acc[i * g->nv + v], c_row(g, i, v));
            LLVMSetAlignment(st, (unsigned)LLVMABISizeOfType(LLVMGetModuleDataLayout(g->mod), g->t_el));
        }
    LLVMBuildRetVoid(g->b);
}

bool cg_llvm_compile_gemm(const cg_gemm_spec *s, void **obj, size_t *obj_size, char *err, size_t cap);
bool cg_llvm_compile_gemm(const cg_gemm_spec *s, void **obj, size_t *obj_size, char *err, size_t cap)
{
    *obj = NULL;
    *obj_size = 0;
    if (!s || (s->bits != 32 && s->bits != 64) || s->lanes < 1 || s->lanes > 16 || (s->lanes & (s->lanes - 1)) ||
        s->mr < 1 || s->nr < s->lanes || s->nr % s->lanes || s->mr * (s->nr / s->lanes) > MAX_ACC ||
        s->nr / s->lanes > MAX_ACC)
        return cg_failf(err, cap, "compile_gemm: unsupported micro-kernel %dx%d, %d lanes of %d bits", s ? s->mr : 0,
                     s ? s->nr : 0, s ? s->lanes : 0, s ? s->bits : 0);
    LLVMTargetMachineRef tm = cg_host_tm(err, cap);
    if (!tm)
        return false;
    ukgen g = {.ctx = LLVMContextCreate(), .mr = s->mr, .nr = s->nr, .lanes = s->lanes, .nv = s->nr / s->lanes};
    g.mod = LLVMModuleCreateWithNameInContext("burnc_gemm", g.ctx);
    g.b = LLVMCreateBuilderInContext(g.ctx);
    LLVMSetTarget(g.mod, cg_host_triple());
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(g.mod, layout);
    LLVMDisposeTargetData(layout);
    g.t_i64 = LLVMInt64TypeInContext(g.ctx);
    g.t_ptr = LLVMPointerTypeInContext(g.ctx, 0);
    g.t_el = s->bits == 32 ? LLVMFloatTypeInContext(g.ctx) : LLVMDoubleTypeInContext(g.ctx);
    g.t_vec = s->lanes > 1 ? LLVMVectorType(g.t_el, (unsigned)s->lanes) : g.t_el;
    build(&g);

    /* O2: the code is already the loop it should be; the passes clean up addressing */
    char *text = NULL;
    bool ok = cg_emit_module(g.mod, tm, "default<O2>", true, "compile_gemm", &text, obj_size, err, cap);
    *obj = text;
    LLVMDisposeBuilder(g.b);
    LLVMDisposeModule(g.mod);
    LLVMContextDispose(g.ctx);
    LLVMDisposeTargetMachine(tm);
    return ok;
}
