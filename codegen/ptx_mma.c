/* The tensor-core matmul kernel generator (ptx_mma.h says what a kernel computes and how it is
 * launched): LLVM IR with the NVVM intrinsics for mma.sync, ldmatrix and cp.async, then
 * default<O3> and PTX, in the burnc-llvm module beside llvm_ptx.c.
 *
 * Everything that depends on the spec (tile loops, fragment offsets, stage layout) is unrolled
 * here in C, so the IR holds one run-time loop over K tiles; the accumulators live in allocas
 * indexed by constants, which SROA turns into registers. */
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm_emit.h"
#include "codegen/llvm_host.h"
#include "codegen/ptx_mma.h"

enum { MAX_ACC = 64 * 4, GROUP = 8 };

typedef struct mg {
    cg_emit e;
    const cg_mma_spec *s;
    LLVMValueRef fn, smem, p[CG_MMA_N_PARAMS];
    LLVMTypeRef t_gptr, t_sptr, t_h2;
    LLVMValueRef tid, lane, wm_off, wn_off, batch, row0, col0; /* i64 */
    LLVMValueRef acc[MAX_ACC];                                  /* allocas of f32 */
    int esz, kstep, mi, ni, threads;
} mg;

enum { P_A, P_B, P_C, P_M, P_N, P_K, P_ABS, P_ALD, P_BBS, P_BLD, P_CBS };

static LLVMValueRef k64(mg *g, int64_t v) { return LLVMConstInt(g->e.t_i64, (unsigned long long)v, 1); }
static LLVMValueRef k32(mg *g, int v) { return LLVMConstInt(g->e.t_i32, (unsigned long long)v, 1); }
static LLVMValueRef add(mg *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(g->e.b, a, b, ""); }
static LLVMValueRef mul(mg *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildMul(g->e.b, a, b, ""); }

static LLVMValueRef sreg(mg *g, const char *which)
{
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.read.ptx.sreg.%s", which);
    return LLVMBuildZExt(g->e.b, cg_call_intrinsic(&g->e, name, NULL, 0, NULL, 0), g->e.t_i64, "");
}

/* A pointer into the dynamic shared memory at byte offset off (i64). */
static LLVMValueRef sptr(mg *g, LLVMValueRef off)
{
    return LLVMBuildGEP2(g->e.b, g->e.t_i8, g->smem, &off, 1, "");
}

static void call0(mg *g, const char *name, LLVMValueRef *args, int n)
{
    cg_call_intrinsic(&g->e, name, NULL, 0, args, n);
}

/* ---- Global -> shared: one stage of one operand ------------------------------------------
 * The stored tile has `rows` rows of `cols` elements (contiguous in memory, stride 1) at pitch
 * bytes in shared memory; global row r0 + i, element c0 + j lies at base + (r0+i)*ld + c0+j.
 * Each thread copies whole 16-byte chunks; a chunk past the row extent, or the part of one past
 * the column extent, is zero-filled (cp.async's src-size), which makes edge tiles exact. */
static void load_tile(mg *g, LLVMValueRef base, LLVMValueRef ld, LLVMValueRef r0, LLVMValueRef r_ext,
                      LLVMValueRef c0, LLVMValueRef c_ext, int rows, int cols, int pitch, LLVMValueRef soff)
{
    LLVMBuilderRef b = g->e.b;
    int per = 16 / g->esz, cpr = cols / per, total = rows * cpr;
    for (int it = 0; it < total / g->threads; it++) {
        LLVMValueRef idx = add(g, g->tid, k64(g, (int64_t)it * g->threads));
        LLVMValueRef r = LLVMBuildUDiv(b, idx, k64(g, cpr), ""), c = LLVMBuildURem(b, idx, k64(g, cpr), "");
        LLVMValueRef gr = add(g, r0, r), gc = add(g, c0, mul(g, c, k64(g, per)));
        LLVMValueRef row_ok = LLVMBuildICmp(b, LLVMIntSLT, gr, r_ext, "");
        LLVMValueRef left = LLVMBuildSub(b, c_ext, gc, "");
        left = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, left, k64(g, 0), ""), k64(g, 0), left, "");
        left = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, left, k64(g, per), ""), k64(g, per), left, "");
        LLVMValueRef bytes = LLVMBuildSelect(b, row_ok, mul(g, left, k64(g, g->esz)), k64(g, 0), "");
        /* an empty copy still names an address: the matrix's first element, always valid */
        LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSGT, bytes, k64(g, 0), "");
        LLVMValueRef eoff = LLVMBuildSelect(b, ok, add(g, mul(g, gr, ld), gc), k64(g, 0), "");
        LLVMValueRef src = LLVMBuildIntToPtr(b, add(g, base, mul(g, eoff, k64(g, g->esz))), g->t_gptr, "");
        LLVMValueRef dst = sptr(g, add(g, soff, add(g, mul(g, r, k64(g, pitch)), mul(g, c, k64(g, 16)))));
        LLVMValueRef args[3] = {dst, src, LLVMBuildTrunc(b, bytes, g->e.t_i32, "")};
        call0(g, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
    }
}

static LLVMValueRef stage_off(mg *g, LLVMValueRef stage)
{
    return mul(g, stage, k64(g, cg_mma_a_bytes(g->s) + cg_mma_b_bytes(g->s)));
}

/* Issues the copies of K tile kt into buffer `stage` (both i64); tiles past K copy zeros. */
static void load_stage(mg *g, LLVMValueRef kt, LLVMValueRef stage)
{
    const cg_mma_spec *s = g->s;
    LLVMValueRef k0 = mul(g, kt, k64(g, s->bk)), so = stage_off(g, stage);
    LLVMValueRef abase = add(g, g->p[P_A], mul(g, g->batch, mul(g, g->p[P_ABS], k64(g, g->esz))));
    LLVMValueRef bbase = add(g, g->p[P_B], mul(g, g->batch, mul(g, g->p[P_BBS], k64(g, g->esz))));
    if (s->a_mmajor)
        load_tile(g, abase, g->p[P_ALD], k0, g->p[P_K], g->row0, g->p[P_M], s->bk, s->bm, cg_mma_pitch(s, s->bm, false),
                  so);
    else
        load_tile(g, abase, g->p[P_ALD], g->row0, g->p[P_M], k0, g->p[P_K], s->bm, s->bk, cg_mma_pitch(s, s->bk, true),
                  so);
    LLVMValueRef bo = add(g, so, k64(g, cg_mma_a_bytes(s)));
    if (s->b_kmajor)
        load_tile(g, bbase, g->p[P_BLD], g->col0, g->p[P_N], k0, g->p[P_K], s->bn, s->bk, cg_mma_pitch(s, s->bk, true),
                  bo);
    else
        load_tile(g, bbase, g->p[P_BLD], k0, g->p[P_K], g->col0, g->p[P_N], s->bk, s->bn, cg_mma_pitch(s, s->bn, false),
                  bo);
    call0(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
}

/* ---- Fragments ----------------------------------------------------------------------------- */

/* ldmatrix .x4 (.trans) at shared byte offset off: four i32 registers. */
static void ldmatrix(mg *g, LLVMValueRef off, bool trans, LLVMValueRef out[4])
{
    LLVMValueRef p = sptr(g, off);
    LLVMTypeRef t = LLVMTypeOf(p);
    LLVMValueRef r = cg_call_intrinsic(&g->e,
                                       trans ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16"
                                             : "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16",
                                       &t, 1, &p, 1);
    for (unsigned i = 0; i < 4; i++)
        out[i] = LLVMBuildExtractValue(g->e.b, r, i, "");
}

/* A tf32 operand element: the f32 at shared byte offset off, rounded to tf32 (to nearest,
 * ties away, as cvt.rna does). */
static LLVMValueRef ld_tf32(mg *g, LLVMValueRef off)
{
    LLVMValueRef v = LLVMBuildLoad2(g->e.b, g->e.t_f32, sptr(g, off), "");
    LLVMSetAlignment(v, 4);
    return cg_call_intrinsic(&g->e, "llvm.nvvm.f2tf32.rna", NULL, 0, &v, 1);
}

/* Shared byte offset of element (row, col) of a stored tile: i64 row, col, constant pitch. */
static LLVMValueRef at(mg *g, LLVMValueRef row, LLVMValueRef col, int pitch)
{
    return add(g, mul(g, row, k64(g, pitch)), mul(g, col, k64(g, g->esz)));
}

/* The mma of one 16 x 8 accumulator tile (acc[base .. base+3]). */
static void mma(mg *g, LLVMValueRef a[4], LLVMValueRef b2[2], int base)
{
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef args[10];
    const char *name = g->s->type == CG_MMA_TF32  ? "llvm.nvvm.mma.m16n8k8.row.col.tf32"
                       : g->s->type == CG_MMA_BF16 ? "llvm.nvvm.mma.m16n8k16.row.col.bf16"
                                                  : "llvm.nvvm.mma.m16n8k16.row.col.f32.f32";
    for (int i = 0; i < 4; i++)
        args[i] = g->s->type == CG_MMA_F16 ? LLVMBuildBitCast(b, a[i], g->t_h2, "") : a[i];
    for (int i = 0; i < 2; i++)
        args[4 + i] = g->s->type == CG_MMA_F16 ? LLVMBuildBitCast(b, b2[i], g->t_h2, "") : b2[i];
    for (int i = 0; i < 4; i++)
        args[6 + i] = LLVMBuildLoad2(b, g->e.t_f32, g->acc[base + i], "");
    LLVMValueRef r = cg_call_intrinsic(&g->e, name, NULL, 0, args, 10);
    for (unsigned i = 0; i < 4; i++)
        LLVMBuildStore(b, LLVMBuildExtractValue(b, r, i, ""), g->acc[base + i]);
}

/* The warp's mma over one stage (stage: i64). Lane l of ldmatrix names row l & 7 of matrix
 * l >> 3; the matrix order below is the fragment register order of mma's A (rows 0-7 / 8-15 by
 * k 0-7 / 8-15) and B (k 0-7 / 8-15 of two n8 tiles). */
static void compute_stage(mg *g, LLVMValueRef stage)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef ao = stage_off(g, stage), bo = add(g, ao, k64(g, cg_mma_a_bytes(s)));
    int pa = s->a_mmajor ? cg_mma_pitch(s, s->bm, false) : cg_mma_pitch(s, s->bk, true);
    int pb = s->b_kmajor ? cg_mma_pitch(s, s->bk, true) : cg_mma_pitch(s, s->bn, false);
    LLVMValueRef l = g->lane, q = LLVMBuildLShr(b, l, k64(g, 3), ""), r8 = LLVMBuildAnd(b, l, k64(g, 7), "");
    LLVMValueRef gid = LLVMBuildLShr(b, l, k64(g, 2), ""), tig = LLVMBuildAnd(b, l, k64(g, 3), "");
    LLVMValueRef q_lo8 = mul(g, LLVMBuildAnd(b, q, k64(g, 1), ""), k64(g, 8));
    LLVMValueRef q_hi8 = mul(g, LLVMBuildLShr(b, q, k64(g, 1), ""), k64(g, 8));
    for (int ks = 0; ks < s->bk / g->kstep; ks++) {
        int k0 = ks * g->kstep;
        LLVMValueRef af[16][4], bf[32][2];
        for (int i = 0; i < g->mi; i++) {
            LLVMValueRef m0 = add(g, g->wm_off, k64(g, i * 16));
            if (g->s->type == CG_MMA_TF32) {
                for (int h = 0; h < 4; h++) { /* (g, t), (g+8, t), (g, t+4), (g+8, t+4) */
                    LLVMValueRef m = add(g, m0, add(g, gid, k64(g, (h & 1) * 8)));
                    LLVMValueRef k = add(g, k64(g, k0 + (h >> 1) * 4), tig);
                    af[i][h] = ld_tf32(g, add(g, ao, s->a_mmajor ? at(g, k, m, pa) : at(g, m, k, pa)));
                }
            } else if (s->a_mmajor) {
                LLVMValueRef k = add(g, k64(g, k0), add(g, r8, q_hi8)), m = add(g, m0, q_lo8);
                ldmatrix(g, add(g, ao, at(g, k, m, pa)), true, af[i]);
            } else {
                LLVMValueRef m = add(g, m0, LLVMBuildAnd(b, l, k64(g, 15), ""));
                LLVMValueRef k = add(g, k64(g, k0), mul(g, LLVMBuildLShr(b, l, k64(g, 4), ""), k64(g, 8)));
                ldmatrix(g, add(g, ao, at(g, m, k, pa)), false, af[i]);
            }
        }
        for (int j = 0; j < g->ni; j += g->s->type == CG_MMA_TF32 ? 1 : 2) {
            LLVMValueRef n0 = add(g, g->wn_off, k64(g, j * 8));
            if (g->s->type == CG_MMA_TF32) {
                for (int h = 0; h < 2; h++) { /* (k = t, n = g), (k = t + 4, n = g) */
                    LLVMValueRef n = add(g, n0, gid), k = add(g, k64(g, k0 + h * 4), tig);
                    bf[j][h] = ld_tf32(g, add(g, bo, s->b_kmajor ? at(g, n, k, pb) : at(g, k, n, pb)));
                }
                continue;
            }
            LLVMValueRef v[4];
            if (s->b_kmajor) {
                LLVMValueRef n = add(g, n0, add(g, r8, q_hi8)), k = add(g, k64(g, k0), q_lo8);
                ldmatrix(g, add(g, bo, at(g, n, k, pb)), false, v);
            } else {
                LLVMValueRef k = add(g, k64(g, k0), add(g, r8, q_lo8)), n = add(g, n0, q_hi8);
                ldmatrix(g, add(g, bo, at(g, k, n, pb)), true, v);
            }
            bf[j][0] = v[0], bf[j][1] = v[1], bf[j + 1][0] = v[2], bf[j + 1][1] = v[3];
        }
        for (int i = 0; i < g->mi; i++)
            for (int j = 0; j < g->ni; j++)
                mma(g, af[i], bf[j], (i * g->ni + j) * 4);
    }
}

/* ---- Stores --------------------------------------------------------------------------------- */

static void store_one(mg *g, LLVMValueRef row, LLVMValueRef col, LLVMValueRef v)
{
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, row, g->p[P_M], ""),
                                   LLVMBuildICmp(b, LLVMIntSLT, col, g->p[P_N], ""), "");
    LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "st");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "st.next");
    LLVMBuildCondBr(b, in, yes, next);
    LLVMPositionBuilderAtEnd(b, yes);
    LLVMValueRef e = add(g, mul(g, g->batch, g->p[P_CBS]), add(g, mul(g, row, g->p[P_N]), col));
    LLVMValueRef addr = LLVMBuildIntToPtr(b, add(g, g->p[P_C], mul(g, e, k64(g, g->esz))), g->t_gptr, "");
    if (g->s->type != CG_MMA_TF32) {
        /* rounded once, to nearest even (cvt.rn) */
        LLVMTypeRef h = g->s->type == CG_MMA_F16 ? LLVMHalfTypeInContext(g->e.ctx) : LLVMBFloatTypeInContext(g->e.ctx);
        v = LLVMBuildFPTrunc(b, v, h, "");
    }
    LLVMValueRef st = LLVMBuildStore(b, v, addr);
    LLVMSetAlignment(st, (unsigned)g->esz);
    LLVMBuildBr(b, next);
    LLVMPositionBuilderAtEnd(b, next);
}

/* Accumulator element h of a 16 x 8 tile sits at row gid + 8 (h >> 1), column 2 tig + (h & 1). */
static void store_c(mg *g)
{
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef gid = LLVMBuildLShr(b, g->lane, k64(g, 2), ""), tig = LLVMBuildAnd(b, g->lane, k64(g, 3), "");
    for (int i = 0; i < g->mi; i++)
        for (int j = 0; j < g->ni; j++)
            for (int h = 0; h < 4; h++) {
                LLVMValueRef row = add(g, add(g, g->row0, g->wm_off), add(g, gid, k64(g, i * 16 + (h >> 1) * 8)));
                LLVMValueRef col = add(g, add(g, g->col0, g->wn_off), add(g, mul(g, tig, k64(g, 2)), k64(g, j * 8 + (h & 1))));
                LLVMValueRef v = LLVMBuildLoad2(b, g->e.t_f32, g->acc[(i * g->ni + j) * 4 + h], "");
                store_one(g, row, col, v);
            }
}

/* ---- The entry ------------------------------------------------------------------------------ */

static void annotate(mg *g)
{
    LLVMContextRef c = g->e.ctx;
    LLVMMetadataRef ops[3] = {LLVMValueAsMetadata(g->fn), LLVMMDStringInContext2(c, "maxntidx", 8),
                              LLVMValueAsMetadata(k32(g, g->threads))};
    LLVMAddNamedMetadataOperand(g->e.mod, "nvvm.annotations",
                                LLVMMetadataAsValue(c, LLVMMDNodeInContext2(c, ops, 3)));
}

static void build(mg *g)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    LLVMTypeRef pt[CG_MMA_N_PARAMS];
    for (int i = 0; i < CG_MMA_N_PARAMS; i++)
        pt[i] = g->e.t_i64;
    g->fn = LLVMAddFunction(g->e.mod, CG_MMA_ENTRY, LLVMFunctionType(g->e.t_void, pt, CG_MMA_N_PARAMS, 0));
    LLVMSetFunctionCallConv(g->fn, LLVMPTXKernelCallConv);
    annotate(g);
    for (int i = 0; i < CG_MMA_N_PARAMS; i++)
        g->p[i] = LLVMGetParam(g->fn, (unsigned)i);
    LLVMTypeRef st = LLVMArrayType2(g->e.t_i8, 0);
    g->smem = LLVMAddGlobalInAddressSpace(g->e.mod, st, "burnc_mma_smem", 3);
    LLVMSetLinkage(g->smem, LLVMExternalLinkage);
    LLVMSetAlignment(g->smem, 16);

    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "entry"));
    for (int i = 0; i < g->mi * g->ni * 4; i++) {
        g->acc[i] = LLVMBuildAlloca(b, g->e.t_f32, "");
        LLVMBuildStore(b, LLVMConstReal(g->e.t_f32, 0.0), g->acc[i]);
    }
    LLVMValueRef kt_var = LLVMBuildAlloca(b, g->e.t_i64, "");
    g->tid = sreg(g, "tid.x");
    g->lane = LLVMBuildAnd(b, g->tid, k64(g, 31), "");
    LLVMValueRef warp = LLVMBuildLShr(b, g->tid, k64(g, 5), "");
    g->wm_off = mul(g, LLVMBuildUDiv(b, warp, k64(g, s->wn), ""), k64(g, s->bm / s->wm));
    g->wn_off = mul(g, LLVMBuildURem(b, warp, k64(g, s->wn), ""), k64(g, s->bn / s->wn));
    /* Blocks start in launch order; taking them GROUP tile rows at a time, column by column,
     * keeps the B tiles that neighbouring blocks read in L2 while those rows pass */
    LLVMValueRef gx = sreg(g, "nctaid.x"), gy = sreg(g, "nctaid.y");
    LLVMValueRef pid = add(g, mul(g, sreg(g, "ctaid.y"), gx), sreg(g, "ctaid.x"));
    LLVMValueRef per_group = mul(g, gx, k64(g, GROUP)), local = LLVMBuildURem(b, pid, per_group, "");
    LLVMValueRef first = mul(g, LLVMBuildUDiv(b, pid, per_group, ""), k64(g, GROUP));
    LLVMValueRef rows = LLVMBuildSub(b, gy, first, "");
    rows = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, rows, k64(g, GROUP), ""), rows, k64(g, GROUP), "");
    g->row0 = mul(g, add(g, first, LLVMBuildURem(b, local, rows, "")), k64(g, s->bm));
    g->col0 = mul(g, LLVMBuildUDiv(b, local, rows, ""), k64(g, s->bn));
    g->batch = sreg(g, "ctaid.z");
    LLVMValueRef n_kt = LLVMBuildUDiv(b, add(g, g->p[P_K], k64(g, s->bk - 1)), k64(g, s->bk), "");

    for (int st = 0; st < s->stages - 1; st++)
        load_stage(g, k64(g, st), k64(g, st));
    LLVMBuildStore(b, k64(g, 0), kt_var);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "kt");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "kt.body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "kt.done");
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef kt = LLVMBuildLoad2(b, g->e.t_i64, kt_var, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, kt, n_kt, ""), body, done);
    LLVMPositionBuilderAtEnd(b, body);
    /* tile kt has landed for every thread, and every warp is past tile kt - 1, whose buffer the
     * copies issued next overwrite */
    LLVMValueRef wait = k32(g, s->stages - 2);
    call0(g, "llvm.nvvm.cp.async.wait.group", &wait, 1);
    call0(g, "llvm.nvvm.barrier0", NULL, 0);
    LLVMValueRef nk = add(g, kt, k64(g, s->stages - 1));
    load_stage(g, nk, LLVMBuildURem(b, nk, k64(g, s->stages), ""));
    compute_stage(g, LLVMBuildURem(b, kt, k64(g, s->stages), ""));
    LLVMBuildStore(b, add(g, kt, k64(g, 1)), kt_var);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, done);
    /* the zero-filling copies past K may still be in flight: none may land after exit */
    call0(g, "llvm.nvvm.cp.async.wait.all", NULL, 0);
    store_c(g);
    LLVMBuildRetVoid(b);
}

/* ---- PTX ------------------------------------------------------------------------------------ */

static pthread_once_t nvptx_once = PTHREAD_ONCE_INIT;
static void nvptx_init(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

bool cg_llvm_compile_mma_ptx(const cg_mma_spec *s, char **ptx, size_t *ptx_size, char *err, size_t cap);
bool cg_llvm_compile_mma_ptx(const cg_mma_spec *s, char **ptx, size_t *ptx_size, char *err, size_t cap)
{
    char why[200];
    *ptx = NULL;
    *ptx_size = 0;
    if (!cg_mma_spec_valid(s, why, sizeof why)) /* an mma below sm_80 would abort LLVM */
        return cg_failf(err, cap, "compile_mma_ptx: %s", why);
    pthread_once(&nvptx_once, nvptx_init);
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple("nvptx64-nvidia-cuda", &target, &msg)) {
        cg_failf(err, cap, "compile_mma_ptx: no NVPTX target in this LLVM: %s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return false;
    }
    /* the newest target LLVM 19 knows at or below s->sm; newer GPUs JIT it */
    const char *cpu = s->sm >= 90 ? "sm_90" : s->sm >= 89 ? "sm_89" : s->sm >= 86 ? "sm_86" : "sm_80";
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, "nvptx64-nvidia-cuda", cpu, "+ptx85",
                                                      LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                                      LLVMCodeModelDefault);
    mg g = {.s = s, .esz = cg_mma_elem_bytes(s), .kstep = s->type == CG_MMA_TF32 ? 8 : 16,
            .mi = s->bm / s->wm / 16, .ni = s->bn / s->wn / 8, .threads = s->wm * s->wn * 32};
    g.e.ctx = LLVMContextCreate();
    g.e.mod = LLVMModuleCreateWithNameInContext("burnc_mma", g.e.ctx);
    g.e.b = LLVMCreateBuilderInContext(g.e.ctx);
    cg_emit_types(&g.e);
    g.t_gptr = LLVMPointerTypeInContext(g.e.ctx, 1);
    g.t_sptr = LLVMPointerTypeInContext(g.e.ctx, 3);
    g.t_h2 = LLVMVectorType(LLVMHalfTypeInContext(g.e.ctx), 2);
    LLVMSetTarget(g.e.mod, "nvptx64-nvidia-cuda");
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(g.e.mod, layout);
    LLVMDisposeTargetData(layout);
    build(&g);
    bool ok = true;
    if (LLVMVerifyModule(g.e.mod, LLVMReturnStatusAction, &msg))
        ok = cg_failf(err, cap, "compile_mma_ptx: invalid IR: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    msg = NULL;
    if (ok) {
        LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
        LLVMErrorRef e = LLVMRunPasses(g.e.mod, "default<O3>", tm, po);
        LLVMDisposePassBuilderOptions(po);
        if (e) {
            char *m = LLVMGetErrorMessage(e);
            ok = cg_failf(err, cap, "compile_mma_ptx: default<O3>: %s", m);
            LLVMDisposeErrorMessage(m);
        }
    }
    LLVMMemoryBufferRef buf = NULL;
    if (ok && LLVMTargetMachineEmitToMemoryBuffer(tm, g.e.mod, LLVMAssemblyFile, &msg, &buf)) {
        ok = cg_failf(err, cap, "compile_mma_ptx: PTX emission failed: %s", msg ? msg : "");
        buf = NULL;
    }
    LLVMDisposeMessage(msg);
    LLVMDisposeBuilder(g.e.b);
    LLVMDisposeModule(g.e.mod);
    LLVMContextDispose(g.e.ctx);
    LLVMDisposeTargetMachine(tm);
    if (!ok)
        return false;
    size_t n = LLVMGetBufferSize(buf);
    *ptx = malloc(n + 1);
    if (!*ptx) {
        LLVMDisposeMemoryBuffer(buf);
        return cg_failf(err, cap, "compile_mma_ptx: no memory for %zu bytes of PTX", n);
    }
    memcpy(*ptx, LLVMGetBufferStart(buf), n);
    (*ptx)[n] = '\0';
    while (n > 0 && (*ptx)[n - 1] == '\0')
        n--;
    *ptx_size = n;
    LLVMDisposeMemoryBuffer(buf);
    return true;
}
