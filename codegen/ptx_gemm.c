/* The SIMT matmul kernel for NVPTX (codegen/ptx_gemm.h is the contract with runtime/cuda/gemm.c).
 *
 * Schedule: a block computes a BM x BN tile of C; K is walked in k-tiles of BK. Each k-tile of
 * A and B goes global -> registers -> shared memory (k-major, so a thread reads its register
 * tile's values as vectors), double buffered: the loads of tile t+1 are issued before tile t
 * is computed and stored to the other buffer after it, one barrier per k-tile. A thread owns a
 * TM x TN register tile split into vector-wide groups spread over the block tile (groups
 * BM*V/TM rows apart), so a quarter warp reads consecutive 16-byte words of shared memory.
 * A pipelined tile (cg_ptx_gemm_spec.pipe) reads each k-step's fragments a step ahead and
 * meets at the barrier before the last step, whose fmas then cover the next tile's first reads.
 * With async_mn an operand read along m/n skips the registers: cp.async copies its next tile
 * into the other buffer, and each thread waits for its copies before the barrier.
 *
 * Numerics: one llvm.fma per k per element, k increasing, from +0.0; nothing else touches the
 * accumulators, and the target machine keeps the C API's defaults (no contraction, no .ftz),
 * so the chain is the cpu device's. f16/bf16 are widened exactly on their way to shared
 * memory and rounded once at the store (llvm_emit.c's conversions). */
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "codegen/llvm_emit.h"
#include "codegen/llvm_host.h"
#include "codegen/ptx_gemm.h"

enum { MAX_TILE = 128 };

typedef struct gg {
    cg_emit e;
    const cg_ptx_gemm_spec *s;
    const kir_kernel *epi;
    cg_ptx_layout lay; /* the epilogue's words, from CG_GEMM_W_EPI */
    LLVMTypeRef t_gptr, t_sptr, ct, mt; /* compute and memory element types */
    int v, T, es, ld_a, ld_b;           /* vector, threads, compute size, shared row lengths */
    LLVMValueRef fn, params, smem;
    LLVMBuilderRef ab; /* allocas at the top of the entry block */
    unsigned md_inv;
    bool async; /* some operand goes by cp.async: the barrier waits for the copies first */
    LLVMValueRef M, N, K, tid, bz;
} gg;

static LLVMValueRef ki64(gg *g, int64_t v) { return LLVMConstInt(g->e.t_i64, (unsigned long long)v, 1); }
static LLVMValueRef ki32(gg *g, int v) { return LLVMConstInt(g->e.t_i32, (unsigned long long)v, 1); }

static LLVMValueRef word(gg *g, int i)
{
    LLVMValueRef ix = ki64(g, i);
    LLVMValueRef v = LLVMBuildLoad2(g->e.b, g->e.t_i64, LLVMBuildGEP2(g->e.b, g->e.t_i64, g->params, &ix, 1, ""), "");
    LLVMSetAlignment(v, 8);
    return v;
}

static int host_word(gg *g, int i) { return CG_GEMM_W_EPI + (g->epi ? g->lay.n_words : 0) + i; }

static LLVMValueRef sreg(gg *g, const char *which)
{
    if (g->s->host) {
        int w = strcmp(which, "tid.x") == 0     ? CG_GEMM_HOST_TID
                : strcmp(which, "ctaid.x") == 0 ? CG_GEMM_HOST_CTAID_X
                : strcmp(which, "ctaid.y") == 0 ? CG_GEMM_HOST_CTAID_Y
                                                : CG_GEMM_HOST_CTAID_Z;
        return word(g, host_word(g, w));
    }
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.read.ptx.sreg.%s", which);
    return LLVMBuildZExt(g->e.b, cg_call_intrinsic(&g->e, name, NULL, 0, NULL, 0), g->e.t_i64, "");
}

static LLVMValueRef add(gg *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(g->e.b, a, b, ""); }
static LLVMValueRef mul(gg *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildMul(g->e.b, a, b, ""); }
static LLVMValueRef ult(gg *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildICmp(g->e.b, LLVMIntULT, a, b, ""); }
static LLVMValueRef and1(gg *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAnd(g->e.b, a, b, ""); }

static LLVMValueRef alloca_of(gg *g, LLVMTypeRef t) { return LLVMBuildAlloca(g->ab, t, ""); }

static LLVMBasicBlockRef block(gg *g, const char *name) { return LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, name); }

static LLVMTypeRef vec_t(LLVMTypeRef e, int n) { return n > 1 ? LLVMVectorType(e, (unsigned)n) : e; }

/* ---- Global -> registers -> shared ------------------------------------------------------------ */

/* One operand's k-tile loads: per thread n loads of w elements (w = v or 1); load r covers
 * tile rows/columns mn[r] (m for A, n for B) and k[r] (tile-relative), contiguous along the
 * mode's axis. */
typedef struct opnd {
    int mode, n, w, extent; /* extent: BM or BN */
    bool is_b;
    LLVMValueRef base;                     /* global pointer of this batch */
    LLVMValueRef s_mn, s_k;                /* strides along m/n and k (elements) */
    LLVMValueRef lim;                      /* M or N */
    LLVMValueRef mn[MAX_TILE], k[MAX_TILE]; /* i64, tile-relative */
    LLVMValueRef stage[MAX_TILE];          /* allocas holding the loaded values (memory type) */
    LLVMValueRef stage_in[MAX_TILE];       /* ... and whether each was in range (i1) */
    int ld;                                /* shared row length */
    LLVMValueRef sbase;                    /* the operand's first shared buffer */
} opnd;

static void opnd_init(gg *g, opnd *o, bool is_b, LLVMValueRef block0)
{
    const cg_ptx_gemm_spec *s = g->s;
    o->is_b = is_b;
    o->mode = is_b ? s->b_mode : s->a_mode;
    o->extent = is_b ? s->bn : s->bm;
    bool vec = o->mode == CG_GEMM_VEC_K || o->mode == CG_GEMM_VEC_MN;
    o->w = vec ? g->v : 1;
    o->n = o->extent * s->bk / (o->w * g->T);
    o->lim = is_b ? g->N : g->M;
    o->ld = is_b ? g->ld_b : g->ld_a;
    LLVMValueRef bs = word(g, is_b ? CG_GEMM_W_B_BS : CG_GEMM_W_A_BS);
    LLVMValueRef p = LLVMBuildIntToPtr(g->e.b, word(g, is_b ? CG_GEMM_W_B : CG_GEMM_W_A), g->t_gptr, "");
    LLVMValueRef off = mul(g, g->bz, bs);
    o->base = LLVMBuildGEP2(g->e.b, g->mt, p, &off, 1, "");
    if (is_b) {
        o->s_k = o->mode == CG_GEMM_VEC_K ? ki64(g, 1) : word(g, CG_GEMM_W_B_KS);
        o->s_mn = o->mode == CG_GEMM_VEC_MN ? ki64(g, 1) : word(g, CG_GEMM_W_B_CS);
    } else {
        o->s_k = o->mode == CG_GEMM_VEC_K ? ki64(g, 1) : word(g, CG_GEMM_W_A_KS);
        o->s_mn = o->mode == CG_GEMM_VEC_MN ? ki64(g, 1) : word(g, CG_GEMM_W_A_RS);
    }
    /* the block's first row (A) or column (B) folded into the base: tile offsets stay small */
    LLVMValueRef first = mul(g, block0, o->s_mn);
    o->base = LLVMBuildGEP2(g->e.b, g->mt, o->base, &first, 1, "");
    o->lim = LLVMBuildSub(g->e.b, o->lim, block0, "");
    bool k_fast = o->mode == CG_GEMM_VEC_K || o->mode == CG_GEMM_SCALAR_K;
    int per_k = s->bk / o->w, per_mn = o->extent / o->w; /* units along the contiguous axis */
    for (int r = 0; r < o->n; r++) {
        LLVMValueRef e = add(g, g->tid, ki64(g, (int64_t)r * g->T));
        if (k_fast) {
            o->mn[r] = LLVMBuildUDiv(g->e.b, e, ki64(g, per_k), "");
            o->k[r] = mul(g, LLVMBuildURem(g->e.b, e, ki64(g, per_k), ""), ki64(g, o->w));
        } else {
            o->k[r] = LLVMBuildUDiv(g->e.b, e, ki64(g, per_mn), "");
            o->mn[r] = mul(g, LLVMBuildURem(g->e.b, e, ki64(g, per_mn), ""), ki64(g, o->w));
        }
        o->stage[r] = alloca_of(g, vec_t(g->mt, o->w));
        o->stage_in[r] = alloca_of(g, g->e.t_i1);
    }
}

static LLVMValueRef shared_at(gg *g, LLVMValueRef base, LLVMValueRef idx)
{
    return LLVMBuildGEP2(g->e.b, g->ct, base, &idx, 1, "");
}

/* The operand's shared buffer buf (i64 0 or 1). */
static LLVMValueRef opnd_buf(gg *g, const opnd *o, LLVMValueRef buf)
{
    return shared_at(g, o->sbase, mul(g, buf, ki64(g, (int64_t)g->s->bk * o->ld)));
}

/* Whether the operand's copies go by cp.async (cg_ptx_gemm_spec.async_mn). */
static bool opnd_async(const gg *g, const opnd *o) { return g->async && o->mode == CG_GEMM_VEC_MN; }

/* Loads the k-tile at k0 into the staging registers, or for a cp.async operand starts its
 * copy into shared buffer buf; what lies outside [0, M or N) x [0, K) is zero (the address is
 * clamped to the tile's base, which is in range whenever a launch has work). Vector modes rely
 * on the extent along the vector being a multiple of it. */
static void opnd_load(gg *g, opnd *o, LLVMValueRef k0, LLVMValueRef buf)
{
    LLVMTypeRef lt = vec_t(g->mt, o->w);
    for (int r = 0; r < o->n; r++) {
        LLVMValueRef kk = add(g, k0, o->k[r]);
        LLVMValueRef in = and1(g, ult(g, o->mn[r], o->lim), ult(g, kk, g->K));
        LLVMValueRef off = add(g, mul(g, o->mn[r], o->s_mn), mul(g, kk, o->s_k));
        off = LLVMBuildSelect(g->e.b, in, off, ki64(g, 0), "");
        LLVMValueRef p = LLVMBuildGEP2(g->e.b, g->mt, o->base, &off, 1, "");
        if (opnd_async(g, o)) { /* a vector along m/n: one 16-byte copy into its k row, zeros where !in */
            LLVMValueRef at = add(g, mul(g, o->k[r], ki64(g, o->ld)), o->mn[r]);
            LLVMValueRef args[3] = {shared_at(g, opnd_buf(g, o, buf), at), p,
                                    LLVMBuildSelect(g->e.b, in, ki32(g, 16), ki32(g, 0), "")};
            cg_call_intrinsic(&g->e, "llvm.nvvm.cp.async.cg.shared.global.16.s", NULL, 0, args, 3);
            continue;
        }
        LLVMValueRef raw = LLVMBuildLoad2(g->e.b, lt, p, "");
        LLVMSetAlignment(raw, (unsigned)(o->w * (int)cg_mem_align(g->s->dt)));
        LLVMSetMetadata(raw, g->md_inv, LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, NULL, 0)));
        /* used only after the tile is computed, so the load's latency hides behind it */
        LLVMBuildStore(g->e.b, raw, o->stage[r]);
        LLVMBuildStore(g->e.b, in, o->stage_in[r]);
    }
}

/* The staged values into shared buffer buf: [k][mn], k-major. */
static void opnd_store(gg *g, opnd *o, LLVMValueRef buf)
{
    if (opnd_async(g, o)) /* already on its way there */
        return;
    LLVMValueRef sb = opnd_buf(g, o, buf);
    bool along_k = o->mode == CG_GEMM_VEC_K;
    for (int r = 0; r < o->n; r++) {
        LLVMValueRef val = cg_from_mem(&g->e, LLVMBuildLoad2(g->e.b, vec_t(g->mt, o->w), o->stage[r], ""), g->s->dt, o->w);
        LLVMValueRef in = LLVMBuildLoad2(g->e.b, g->e.t_i1, o->stage_in[r], "");
        val = LLVMBuildSelect(g->e.b, in, val, LLVMConstNull(vec_t(g->ct, o->w)), "");
        LLVMValueRef at = add(g, mul(g, o->k[r], ki64(g, o->ld)), o->mn[r]);
        if (o->w == 1 || !along_k) { /* one element, or a vector along m/n: one store */
            LLVMValueRef st = LLVMBuildStore(g->e.b, val, shared_at(g, sb, at));
            LLVMSetAlignment(st, (unsigned)(o->w * g->es));
            continue;
        }
        for (int c = 0; c < o->w; c++) { /* a vector along k lands in w rows */
            LLVMValueRef x = LLVMBuildExtractElement(g->e.b, val, ki32(g, c), "");
            LLVMValueRef st = LLVMBuildStore(g->e.b, x, shared_at(g, sb, add(g, at, ki64(g, (int64_t)c * o->ld))));
            LLVMSetAlignment(st, (unsigned)g->es);
        }
    }
}

/* The block's barrier; this thread's cp.async copies land first, so the barrier publishes them. */
static void barrier(gg *g)
{
    if (g->async)
        cg_call_intrinsic(&g->e, "llvm.nvvm.cp.async.wait.all", NULL, 0, NULL, 0);
    if (!g->s->host) {
        cg_call_intrinsic(&g->e, "llvm.nvvm.barrier0", NULL, 0, NULL, 0);
        return;
    }
    LLVMTypeRef fty = LLVMFunctionType(g->e.t_void, &g->e.t_ptr, 1, 0);
    LLVMValueRef fn = LLVMBuildIntToPtr(g->e.b, word(g, host_word(g, CG_GEMM_HOST_BARRIER)), g->e.t_ptr, "");
    LLVMValueRef arg = LLVMBuildIntToPtr(g->e.b, word(g, host_word(g, CG_GEMM_HOST_BARRIER_ARG)), g->e.t_ptr, "");
    LLVMBuildCall2(g->e.b, fty, fn, &arg, 1, "");
}

/* ---- The epilogue ------------------------------------------------------------------------------- */

/* One C element's epilogue: the product, its domain indices and the slots' offsets. */
typedef struct esite {
    LLVMValueRef c;                     /* the product as the C slot's load gives it */
    LLVMValueRef idx[BURNC_MAX_RANK];
    LLVMValueRef in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
    LLVMValueRef *val;                  /* memo [n_insts] */
} esite;

/* Slot s's stride along axis d as a value (NULL: broadcast). */
static LLVMValueRef epi_stride(gg *g, bool out, int s, int d)
{
    const kir_slot *sl = out ? &g->epi->outputs[s] : &g->epi->inputs[s];
    if (sl->stride[d] == KIR_STRIDE_ZERO)
        return NULL;
    if (sl->stride[d] == KIR_STRIDE_UNIT)
        return ki64(g, 1);
    return word(g, CG_GEMM_W_EPI + (out ? g->lay.out_stride : g->lay.in_stride) + s * g->epi->rank + d);
}

static LLVMValueRef epi_ev(gg *g, esite *s, int i)
{
    if (s->val[i])
        return s->val[i];
    const kir_kernel *k = g->epi;
    const kir_inst *in = &k->insts[i];
    int t = in->type;
    LLVMValueRef v;
    switch (in->op) {
    case KIR_LOAD:
        if (in->a == g->s->epi_c_slot) {
            v = s->c;
        } else {
            burnc_dtype_t dt = k->inputs[in->a].dtype;
            LLVMValueRef base = LLVMBuildIntToPtr(g->e.b, word(g, CG_GEMM_W_EPI + g->lay.in_addr + in->a), g->t_gptr, "");
            LLVMValueRef p = LLVMBuildGEP2(g->e.b, cg_mem_ty(&g->e, dt), base, &s->in_off[in->a], 1, "");
            LLVMValueRef raw = LLVMBuildLoad2(g->e.b, cg_mem_ty(&g->e, dt), p, "");
            LLVMSetAlignment(raw, cg_mem_align(dt));
            v = cg_from_mem(&g->e, raw, dt, 1);
        }
        break;
    case KIR_CONST:
        v = t_fp(t) ? cg_kfp(&g->e, t, in->imm.f, 1)
                    : kint(cg_ty_of(&g->e, t), t == KIR_BOOL ? in->imm.u != 0 : in->imm.u, 1);
        break;
    case KIR_ARG: {
        LLVMValueRef u = word(g, CG_GEMM_W_EPI + g->lay.scalars + in->a);
        if (t_fp(t)) {
            v = LLVMBuildBitCast(g->e.b, u, g->e.t_f64, "");
            if (t == KIR_F32)
                v = LLVMBuildFPTrunc(g->e.b, v, g->e.t_f32, "");
        } else if (t == KIR_BOOL) {
            v = LLVMBuildICmp(g->e.b, LLVMIntNE, u, ki64(g, 0), "");
        } else {
            v = t == KIR_I64 || t == KIR_U64 ? u : LLVMBuildTrunc(g->e.b, u, cg_ty_of(&g->e, t), "");
        }
        break;
    }
    case KIR_INDEX: v = s->idx[in->a]; break;
    case KIR_EXTENT: v = word(g, CG_GEMM_W_EPI + g->lay.extents + in->a); break;
    case KIR_ROW_LEN: v = ki64(g, 1); break;
    default: {
        LLVMValueRef a = epi_ev(g, s, in->a);
        int ta = k->insts[in->a].type;
        if (kir_n_operands(in->op) == 1) {
            v = cg_unary(&g->e, in, ta, a, 1);
            break;
        }
        LLVMValueRef b = epi_ev(g, s, in->b);
        if (in->op >= KIR_EQ && in->op <= KIR_GE)
            v = cg_compare(&g->e, in->op, ta, a, b);
        else if (kir_n_operands(in->op) == 2)
            v = cg_binary(&g->e, in->op, t, a, b, 1);
        else if (in->op == KIR_SELECT)
            v = LLVMBuildSelect(g->e.b, a, b, epi_ev(g, s, in->c), "");
        else {
            LLVMValueRef args[3] = {a, b, epi_ev(g, s, in->c)};
            LLVMTypeRef ft = LLVMTypeOf(a);
            v = cg_call_intrinsic(&g->e, "llvm.fma", &ft, 1, args, 3);
        }
    }
    }
    return s->val[i] = v;
}

/* Per row of C: the epilogue's indices along its leading axes and the slots' offsets at the
 * row's first element. The row's flat number q = batch * M + m is cut over the extents
 * e[0..rank-2] and e[rank-1] / N (QLAST): the last axis holds whole rows of C. */
typedef struct erow {
    LLVMValueRef idx[BURNC_MAX_RANK], last0; /* last0: the last axis' index at column 0 */
    LLVMValueRef in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
} erow;

static void epi_row(gg *g, LLVMValueRef row, erow *r)
{
    const kir_kernel *k = g->epi;
    int last = k->rank - 1;
    LLVMValueRef q = add(g, mul(g, add(g, word(g, CG_GEMM_W_BATCH0), g->bz), g->M), row);
    for (int d = last; d >= 0; d--) {
        LLVMValueRef ext = d == last ? word(g, CG_GEMM_W_QLAST) : word(g, CG_GEMM_W_EPI + g->lay.extents + d);
        if (d == 0) {
            r->idx[d] = q;
            break;
        }
        LLVMValueRef qq = LLVMBuildUDiv(g->e.b, q, ext, "");
        r->idx[d] = LLVMBuildSub(g->e.b, q, mul(g, qq, ext), "");
        q = qq;
    }
    r->last0 = mul(g, r->idx[last], g->N);
    for (int pass = 0; pass < 2; pass++)
        for (int s = 0; s < (pass ? k->n_outputs : k->n_inputs); s++) {
            LLVMValueRef off = word(g, CG_GEMM_W_EPI + (pass ? g->lay.out_off : g->lay.in_off) + s);
            for (int d = 0; d <= last; d++) {
                LLVMValueRef st = epi_stride(g, pass, s, d);
                if (st)
                    off = add(g, off, mul(g, d == last ? r->last0 : r->idx[d], st));
            }
            (pass ? r->out_off : r->in_off)[s] = off;
        }
}

/* One C element's epilogue at column col (in range: the caller clamps it): for each of the
 * kernel's stores its value in the output's memory type and its address. */
static bool epi_element(gg *g, const erow *r, LLVMValueRef col, LLVMValueRef c_val, LLVMValueRef *vals,
                        LLVMValueRef *ptrs)
{
    const kir_kernel *k = g->epi;
    int last = k->rank - 1;
    esite s = {.c = c_val};
    s.val = calloc((size_t)(k->n_insts > 0 ? k->n_insts : 1), sizeof *s.val);
    if (!s.val)
        return false;
    memcpy(s.idx, r->idx, sizeof s.idx);
    s.idx[last] = add(g, r->last0, col);
    for (int pass = 0; pass < 2; pass++)
        for (int sl = 0; sl < (pass ? k->n_outputs : k->n_inputs); sl++) {
            LLVMValueRef st = epi_stride(g, pass, sl, last);
            LLVMValueRef off = (pass ? r->out_off : r->in_off)[sl];
            (pass ? s.out_off : s.in_off)[sl] = st ? add(g, off, mul(g, col, st)) : off;
        }
    for (int i = 0; i < k->n_stores; i++) {
        const kir_store *st = &k->stores[i];
        burnc_dtype_t dt = k->outputs[st->slot].dtype;
        vals[i] = cg_to_mem(&g->e, epi_ev(g, &s, st->value), k->insts[st->value].type, dt, 1);
        LLVMValueRef base = LLVMBuildIntToPtr(g->e.b, word(g, CG_GEMM_W_EPI + g->lay.out_addr + st->slot), g->t_gptr, "");
        ptrs[i] = LLVMBuildGEP2(g->e.b, cg_mem_ty(&g->e, dt), base, &s.out_off[st->slot], 1, "");
    }
    free(s.val);
    return true;
}

/* Stores vals[0..v-1] of memory type mt at ptrs[0..v-1] (consecutive elements when `contiguous`):
 * one vector store where `whole` (all v in range) and the first address is aligned to the
 * vector, else each element whose column col0 + c is below N. */
static void vec_store(gg *g, LLVMTypeRef mt, const LLVMValueRef *vals, const LLVMValueRef *ptrs, bool contiguous,
                      LLVMValueRef whole, LLVMValueRef col0)
{
    LLVMBuilderRef b = g->e.b;
    int v = g->v;
    unsigned size = (unsigned)LLVMABISizeOfType(LLVMGetModuleDataLayout(g->e.mod), mt);
    LLVMBasicBlockRef join = NULL;
    if (contiguous) {
        LLVMValueRef addr = LLVMBuildPtrToInt(b, ptrs[0], g->e.t_i64, "");
        LLVMValueRef aligned = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, addr, ki64(g, (int64_t)v * size - 1), ""),
                                             ki64(g, 0), "");
        LLVMBasicBlockRef one = block(g, "vec"), each = block(g, "each");
        join = block(g, "stored");
        LLVMBuildCondBr(b, and1(g, whole, aligned), one, each);
        LLVMPositionBuilderAtEnd(b, one);
        LLVMValueRef x = LLVMGetUndef(vec_t(mt, v));
        for (int c = 0; c < v; c++)
            x = LLVMBuildInsertElement(b, x, vals[c], ki32(g, c), "");
        LLVMSetAlignment(LLVMBuildStore(b, x, ptrs[0]), (unsigned)v * size);
        LLVMBuildBr(b, join);
        LLVMPositionBuilderAtEnd(b, each);
    }
    for (int c = 0; c < v; c++) {
        LLVMBasicBlockRef in = cg_if_begin(&g->e, ult(g, add(g, col0, ki64(g, c)), g->N), "if");
        LLVMSetAlignment(LLVMBuildStore(b, vals[c], ptrs[c]), size);
        cg_if_end(&g->e, in);
    }
    if (join) {
        LLVMBuildBr(b, join);
        LLVMPositionBuilderAtEnd(b, join);
    }
}

/* A counted loop i = 0..n-1 that is never unrolled (it exists to keep one copy of its body). */
typedef struct cloop {
    LLVMValueRef var, i;
    LLVMBasicBlockRef head, done;
} cloop;

static void cloop_begin(gg *g, cloop *l, int n)
{
    LLVMBuilderRef b = g->e.b;
    l->var = alloca_of(g, g->e.t_i64);
    LLVMBuildStore(b, ki64(g, 0), l->var);
    l->head = block(g, "epi");
    LLVMBasicBlockRef body = block(g, "epi_body");
    l->done = block(g, "epi_done");
    LLVMBuildBr(b, l->head);
    LLVMPositionBuilderAtEnd(b, l->head);
    l->i = LLVMBuildLoad2(b, g->e.t_i64, l->var, "");
    LLVMBuildCondBr(b, ult(g, l->i, ki64(g, n)), body, l->done);
    LLVMPositionBuilderAtEnd(b, body);
}

static void cloop_end(gg *g, cloop *l)
{
    LLVMBuilderRef b = g->e.b;
    LLVMBuildStore(b, add(g, l->i, ki64(g, 1)), l->var);
    LLVMValueRef br = LLVMBuildBr(b, l->head);
    LLVMMetadataRef self = LLVMTemporaryMDNode(g->e.ctx, NULL, 0);
    LLVMMetadataRef name = LLVMMDStringInContext2(g->e.ctx, "llvm.loop.unroll.disable", 24);
    LLVMMetadataRef ops[2] = {self, LLVMMDNodeInContext2(g->e.ctx, &name, 1)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(g->e.ctx, ops, 2);
    LLVMMetadataReplaceAllUsesWith(self, id);
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(g->e.ctx, "llvm.loop", 9), LLVMMetadataAsValue(g->e.ctx, id));
    LLVMPositionBuilderAtEnd(b, l->done);
}

/* With an epilogue, C's tile goes through shared memory a slab at a time: register group gi
 * of every thread (rows ty V + gi span_m + c, c < V) fills span_m rows, then the block walks
 * those rows as vectors of V columns, thread t taking vectors t, t + T, ... (TN of them), so
 * consecutive threads read and write consecutive columns. The epilogue's code is emitted once
 * per vector element inside that loop (unrolled, a GELU over the whole register tile made half
 * a megabyte of PTX and seconds of ptxas; through local memory, it cost more than the separate
 * kernel). A row's indices and offsets (divisions) are computed once per vector. */
static bool epi_stores(gg *g, const LLVMValueRef *vals, LLVMValueRef m0, LLVMValueRef n0, LLVMValueRef a_frag0,
                       LLVMValueRef b_frag0, int span_m, int span_n, LLVMValueRef store_c, LLVMValueRef cp)
{
    const cg_ptx_gemm_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    int v = g->v, ldc = s->bn + cg_ptx_gemm_pad(s->dt), et = s->dt == BURNC_DTYPE_F64 ? KIR_F64 : KIR_F32;
    int per_row = s->bn / v; /* vectors in a slab row */
    LLVMTypeRef vt = vec_t(g->ct, v);
    bool ok = true;
    for (int gi = 0; gi < s->tm / v && ok; gi++) {
        barrier(g); /* the k-loop's (or the previous slab's) readers are done */
        for (int c = 0; c < v; c++)
            for (int gj = 0; gj < s->tn / v; gj++) {
                LLVMValueRef x = LLVMGetUndef(vt);
                for (int cc = 0; cc < v; cc++)
                    x = LLVMBuildInsertElement(b, x, vals[(gi * v + c) * s->tn + gj * v + cc], ki32(g, cc), "");
                LLVMValueRef at = add(g, mul(g, add(g, a_frag0, ki64(g, c)), ki64(g, ldc)),
                                      add(g, b_frag0, ki64(g, (int64_t)gj * span_n)));
                LLVMSetAlignment(LLVMBuildStore(b, x, shared_at(g, g->smem, at)), (unsigned)(v * g->es));
            }
        barrier(g);
        cloop l;
        cloop_begin(g, &l, s->tn);
        LLVMValueRef e = add(g, g->tid, mul(g, l.i, ki64(g, g->T)));
        LLVMValueRef rl = LLVMBuildUDiv(b, e, ki64(g, per_row), ""), cv = LLVMBuildURem(b, e, ki64(g, per_row), "");
        LLVMValueRef row = add(g, m0, add(g, rl, ki64(g, (int64_t)gi * span_m)));
        LLVMValueRef col0 = add(g, n0, mul(g, cv, ki64(g, v)));
        LLVMValueRef x = LLVMBuildLoad2(b, vt, shared_at(g, g->smem, add(g, mul(g, rl, ki64(g, ldc)), mul(g, cv, ki64(g, v)))), "");
        LLVMSetAlignment(x, (unsigned)(v * g->es));
        LLVMBasicBlockRef row_in = cg_if_begin(&g->e, ult(g, row, g->M), "if");
        erow er;
        epi_row(g, row, &er);
        /* the vector's elements, columns clamped into the row (the ones past N are not stored),
         * then their stores: C's and each output's as one vector where whole and aligned */
        const kir_kernel *k = g->epi;
        LLVMValueRef mem[8], ptrs[8], outv[KIR_MAX_OUTPUTS][8], outp[KIR_MAX_OUTPUTS][8];
        LLVMValueRef last_col = LLVMBuildSub(b, g->N, ki64(g, 1), "");
        for (int cc = 0; cc < v && ok; cc++) {
            LLVMValueRef col = add(g, col0, ki64(g, cc));
            col = LLVMBuildSelect(b, ult(g, col, g->N), col, last_col, "");
            mem[cc] = cg_to_mem(&g->e, LLVMBuildExtractElement(b, x, ki32(g, cc), ""), et, s->dt, 1);
            LLVMValueRef off = add(g, mul(g, row, g->N), col);
            ptrs[cc] = LLVMBuildGEP2(b, g->mt, cp, &off, 1, "");
            LLVMValueRef sv[KIR_MAX_OUTPUTS], sp[KIR_MAX_OUTPUTS];
            ok = epi_element(g, &er, col, cg_from_mem(&g->e, mem[cc], s->dt, 1), sv, sp);
            for (int i = 0; i < k->n_stores && ok; i++)
                outv[i][cc] = sv[i], outp[i][cc] = sp[i];
        }
        LLVMValueRef whole = LLVMBuildICmp(b, LLVMIntULE, add(g, col0, ki64(g, v)), g->N, "");
        LLVMBasicBlockRef c_in = cg_if_begin(&g->e, store_c, "if");
        vec_store(g, g->mt, mem, ptrs, true, whole, col0);
        cg_if_end(&g->e, c_in);
        for (int i = 0; i < k->n_stores && ok; i++) {
            const kir_slot *o = &k->outputs[k->stores[i].slot];
            vec_store(g, cg_mem_ty(&g->e, o->dtype), outv[i], outp[i], o->stride[k->rank - 1] == KIR_STRIDE_UNIT, whole,
                      col0);
        }
        cg_if_end(&g->e, row_in);
        cloop_end(g, &l);
    }
    return ok;
}

/* ---- The kernel --------------------------------------------------------------------------------- */

/* The register fragments of k-step kk from shared buffers sa (A) and sb (B): the thread's
 * TM / V vectors of A and TN / V of B. */
static void frag_load(gg *g, LLVMValueRef sa, LLVMValueRef sb, int kk, LLVMValueRef a_frag0, LLVMValueRef b_frag0,
                      LLVMValueRef *av, LLVMValueRef *bv)
{
    const cg_ptx_gemm_spec *s = g->s;
    int v = g->v, span_m = s->bm * v / s->tm, span_n = s->bn * v / s->tn;
    LLVMTypeRef vt = vec_t(g->ct, v);
    for (int gi = 0; gi < s->tm / v; gi++) {
        LLVMValueRef at = add(g, a_frag0, ki64(g, (int64_t)kk * g->ld_a + (int64_t)gi * span_m));
        av[gi] = LLVMBuildLoad2(g->e.b, vt, shared_at(g, sa, at), "");
        LLVMSetAlignment(av[gi], (unsigned)(v * g->es));
    }
    for (int gj = 0; gj < s->tn / v; gj++) {
        LLVMValueRef at = add(g, b_frag0, ki64(g, (int64_t)kk * g->ld_b + (int64_t)gj * span_n));
        bv[gj] = LLVMBuildLoad2(g->e.b, vt, shared_at(g, sb, at), "");
        LLVMSetAlignment(bv[gj], (unsigned)(v * g->es));
    }
}

/* Tile-relative row (or column) of register element i of a thread at position t along it. */
static int64_t frag_pos(int i, int v, int span) { return (int64_t)(i / v) * span + i % v; }

static bool build(gg *g)
{
    const cg_ptx_gemm_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    LLVMTypeRef fty = LLVMFunctionType(g->e.t_void, &g->e.t_ptr, 1, 0);
    g->fn = LLVMAddFunction(g->e.mod, s->host ? CG_SYM_ROWS : CG_GEMM_ENTRY, fty);
    if (!s->host) {
        LLVMSetFunctionCallConv(g->fn, LLVMPTXKernelCallConv);
        int n_words = CG_GEMM_W_EPI + (g->epi ? g->lay.n_words : 0);
        LLVMTypeRef blk = LLVMArrayType2(g->e.t_i64, (uint64_t)n_words);
        unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5), align = LLVMGetEnumAttributeKindForName("align", 5);
        LLVMAddAttributeAtIndex(g->fn, 1, LLVMCreateTypeAttribute(g->e.ctx, byval, blk));
        LLVMAddAttributeAtIndex(g->fn, 1, LLVMCreateEnumAttribute(g->e.ctx, align, 8));
    }
    g->params = LLVMGetParam(g->fn, 0);
    LLVMPositionBuilderAtEnd(b, block(g, "entry"));
    g->ab = LLVMCreateBuilderInContext(g->e.ctx);
    LLVMPositionBuilderBefore(g->ab, LLVMBuildAlloca(b, g->e.t_i8, ""));
    if (!s->host)
        cg_ptx_grid_dependency(g->e.ctx, b, s->sm);
    if (s->host)
        g->smem = LLVMBuildIntToPtr(b, word(g, host_word(g, CG_GEMM_HOST_SMEM)), g->t_sptr, "");

    g->M = word(g, CG_GEMM_W_M), g->N = word(g, CG_GEMM_W_N), g->K = word(g, CG_GEMM_W_K);
    g->tid = sreg(g, "tid.x");
    g->bz = sreg(g, "ctaid.z");
    LLVMValueRef m0 = mul(g, sreg(g, "ctaid.y"), ki64(g, s->bm)), n0 = mul(g, sreg(g, "ctaid.x"), ki64(g, s->bn));
    opnd A = {0}, B = {0};
    opnd_init(g, &A, false, m0);
    opnd_init(g, &B, true, n0);
    A.sbase = g->smem;
    B.sbase = shared_at(g, g->smem, ki64(g, 2 * (int64_t)s->bk * g->ld_a));

    /* register tile: rows ty*V + group * (BM*V/TM), columns tx*V + group * (BN*V/TN) */
    int tx_n = s->bn / s->tn, v = g->v;
    LLVMValueRef tx = LLVMBuildURem(b, g->tid, ki64(g, tx_n), ""), ty = LLVMBuildUDiv(b, g->tid, ki64(g, tx_n), "");
    int span_m = s->bm * v / s->tm, span_n = s->bn * v / s->tn;
    LLVMValueRef a_frag0 = mul(g, ty, ki64(g, v)), b_frag0 = mul(g, tx, ki64(g, v));
    LLVMValueRef acc[MAX_TILE];
    for (int i = 0; i < s->tm * s->tn; i++) {
        acc[i] = alloca_of(g, g->ct);
        LLVMBuildStore(b, LLVMConstNull(g->ct), acc[i]);
    }

    /* pipelined: the register fragments of k-step 0, carried from one k-tile to the next */
    int nga = s->tm / v, ngb = s->tn / v;
    LLVMTypeRef vt = vec_t(g->ct, v);
    LLVMValueRef fa[MAX_TILE / 4], fb[MAX_TILE / 4], av[MAX_TILE / 4], bv[MAX_TILE / 4];
    for (int i = 0; i < nga && s->pipe; i++)
        fa[i] = alloca_of(g, vt);
    for (int j = 0; j < ngb && s->pipe; j++)
        fb[j] = alloca_of(g, vt);

    /* prologue: tile 0 into buffer 0 (none when K is 0: the operands may have no memory) */
    LLVMValueRef nk = LLVMBuildUDiv(b, add(g, g->K, ki64(g, s->bk - 1)), ki64(g, s->bk), "");
    LLVMBasicBlockRef no_k = cg_if_begin(&g->e, LLVMBuildICmp(b, LLVMIntNE, nk, ki64(g, 0), ""), "if");
    opnd_load(g, &A, ki64(g, 0), ki64(g, 0));
    opnd_load(g, &B, ki64(g, 0), ki64(g, 0));
    opnd_store(g, &A, ki64(g, 0));
    opnd_store(g, &B, ki64(g, 0));
    barrier(g);
    if (s->pipe) {
        frag_load(g, A.sbase, B.sbase, 0, a_frag0, b_frag0, av, bv);
        for (int i = 0; i < nga; i++)
            LLVMBuildStore(b, av[i], fa[i]);
        for (int j = 0; j < ngb; j++)
            LLVMBuildStore(b, bv[j], fb[j]);
    }
    cg_if_end(&g->e, no_k);
    LLVMValueRef tvar = alloca_of(g, g->e.t_i64);
    LLVMBuildStore(b, ki64(g, 0), tvar);
    LLVMBasicBlockRef head = block(g, "ktile"), body = block(g, "ktile_body"), done = block(g, "ktile_done");
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef t = LLVMBuildLoad2(b, g->e.t_i64, tvar, "");
    LLVMBuildCondBr(b, ult(g, t, nk), body, done);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef buf = LLVMBuildAnd(b, t, ki64(g, 1), ""), next = add(g, t, ki64(g, 1));
    LLVMValueRef nbuf = LLVMBuildXor(b, buf, ki64(g, 1), "");
    /* the next tile's loads are in flight while this one is computed (past the end they are
     * predicated off and only fill the idle buffer with zeros) */
    LLVMValueRef k_next = mul(g, next, ki64(g, s->bk));
    opnd_load(g, &A, k_next, nbuf);
    opnd_load(g, &B, k_next, nbuf);
    LLVMValueRef sa = opnd_buf(g, &A, buf), sb = opnd_buf(g, &B, buf);
    LLVMValueRef accv[MAX_TILE];
    for (int i = 0; i < s->tm * s->tn; i++)
        accv[i] = LLVMBuildLoad2(b, g->ct, acc[i], "");
    for (int i = 0; i < nga && s->pipe; i++)
        av[i] = LLVMBuildLoad2(b, vt, fa[i], "");
    for (int j = 0; j < ngb && s->pipe; j++)
        bv[j] = LLVMBuildLoad2(b, vt, fb[j], "");
    /* Plain: each k-step reads its fragments, then the next tile goes to the other buffer and
     * the block meets at the barrier. Pipelined (CUTLASS's order): step kk + 1's fragments are
     * read before step kk's fmas; before the last step the next tile is stored and the block
     * meets (every read of this buffer has been issued), so the next tile's first fragments
     * are read while the last step's fmas run instead of after the barrier with nothing to do. */
    LLVMTypeRef fmat = g->ct;
    for (int kk = 0; kk < s->bk; kk++) {
        LLVMValueRef an[MAX_TILE / 4], bn[MAX_TILE / 4];
        if (!s->pipe) {
            frag_load(g, sa, sb, kk, a_frag0, b_frag0, av, bv);
        } else if (kk + 1 < s->bk) {
            frag_load(g, sa, sb, kk + 1, a_frag0, b_frag0, an, bn);
        } else {
            opnd_store(g, &A, nbuf);
            opnd_store(g, &B, nbuf);
            barrier(g);
            frag_load(g, opnd_buf(g, &A, nbuf), opnd_buf(g, &B, nbuf), 0, a_frag0, b_frag0, an, bn);
        }
        for (int i = 0; i < s->tm; i++) {
            LLVMValueRef x = LLVMBuildExtractElement(b, av[i / v], ki32(g, i % v), "");
            for (int jj = 0; jj < s->tn; jj++) {
                int j = s->snake && (i & 1) ? s->tn - 1 - jj : jj;
                LLVMValueRef y = LLVMBuildExtractElement(b, bv[j / v], ki32(g, j % v), "");
                LLVMValueRef args[3] = {x, y, accv[i * s->tn + j]};
                accv[i * s->tn + j] = cg_call_intrinsic(&g->e, "llvm.fma", &fmat, 1, args, 3);
            }
        }
        if (s->pipe) {
            memcpy(av, an, sizeof(LLVMValueRef) * (size_t)nga);
            memcpy(bv, bn, sizeof(LLVMValueRef) * (size_t)ngb);
        }
    }
    for (int i = 0; i < s->tm * s->tn; i++)
        LLVMBuildStore(b, accv[i], acc[i]);
    for (int i = 0; i < nga && s->pipe; i++)
        LLVMBuildStore(b, av[i], fa[i]);
    for (int j = 0; j < ngb && s->pipe; j++)
        LLVMBuildStore(b, bv[j], fb[j]);
    if (!s->pipe) {
        opnd_store(g, &A, nbuf);
        opnd_store(g, &B, nbuf);
        barrier(g);
    }
    LLVMBuildStore(b, next, tvar);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, done);

    /* stores: C (vectors where whole and allowed), then the epilogue per element */
    LLVMValueRef flags = word(g, CG_GEMM_W_FLAGS);
    LLVMValueRef store_c = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, ki64(g, CG_GEMM_F_STORE_C), ""), ki64(g, 0), "");
    LLVMValueRef c_vec = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, ki64(g, CG_GEMM_F_C_VEC), ""), ki64(g, 0), "");
    LLVMValueRef cp = LLVMBuildIntToPtr(b, word(g, CG_GEMM_W_C), g->t_gptr, "");
    LLVMValueRef coff = mul(g, g->bz, word(g, CG_GEMM_W_C_BS));
    cp = LLVMBuildGEP2(b, g->mt, cp, &coff, 1, "");
    LLVMValueRef vals[MAX_TILE];
    for (int i = 0; i < s->tm * s->tn; i++)
        vals[i] = LLVMBuildLoad2(b, g->ct, acc[i], "");
    int et = g->s->dt == BURNC_DTYPE_F64 ? KIR_F64 : KIR_F32;
    if (g->epi) {
        bool ok = epi_stores(g, vals, m0, n0, a_frag0, b_frag0, span_m, span_n, store_c, cp);
        LLVMBuildRetVoid(b);
        LLVMDisposeBuilder(g->ab);
        return ok;
    }
    for (int i = 0; i < s->tm; i++) {
        LLVMValueRef row = add(g, m0, add(g, a_frag0, ki64(g, frag_pos(i, v, span_m))));
        LLVMValueRef rin = ult(g, row, g->M);
        for (int gj = 0; gj < s->tn / v; gj++) {
            LLVMValueRef col0 = add(g, n0, add(g, b_frag0, ki64(g, (int64_t)gj * span_n)));
            LLVMValueRef mem[8];
            for (int c = 0; c < v; c++)
                mem[c] = cg_to_mem(&g->e, vals[i * s->tn + gj * v + c], et, g->s->dt, 1);
            LLVMValueRef whole = and1(g, and1(g, store_c, c_vec), and1(g, rin, LLVMBuildICmp(b, LLVMIntULE,
                                                                                         add(g, col0, ki64(g, v)), g->N, "")));
            LLVMValueRef at = add(g, mul(g, row, g->N), col0);
            LLVMBasicBlockRef join = cg_if_begin(&g->e, whole, "if");
            LLVMValueRef vec = LLVMGetUndef(vec_t(g->mt, v));
            for (int c = 0; c < v; c++)
                vec = LLVMBuildInsertElement(b, vec, mem[c], ki32(g, c), "");
            LLVMSetAlignment(LLVMBuildStore(b, vec, LLVMBuildGEP2(b, g->mt, cp, &at, 1, "")),
                             (unsigned)(v * (int)cg_mem_align(g->s->dt)));
            cg_if_end(&g->e, join);
            for (int c = 0; c < v; c++) {
                LLVMValueRef col = add(g, col0, ki64(g, c));
                LLVMBasicBlockRef j2 = cg_if_begin(&g->e, and1(g, rin, ult(g, col, g->N)), "if");
                LLVMBasicBlockRef j3 = cg_if_begin(&g->e, and1(g, store_c, LLVMBuildNot(b, whole, "")), "if");
                LLVMValueRef atc = add(g, at, ki64(g, c));
                LLVMSetAlignment(LLVMBuildStore(b, mem[c], LLVMBuildGEP2(b, g->mt, cp, &atc, 1, "")),
                                 cg_mem_align(g->s->dt));
                cg_if_end(&g->e, j3);
                cg_if_end(&g->e, j2);
            }
        }
    }
    LLVMBuildRetVoid(b);
    LLVMDisposeBuilder(g->ab);
    return true;
}

/* ---- The module --------------------------------------------------------------------------------- */

/* nvvm.annotations: the block size, so ptxas budgets registers for it (and for two blocks per
 * SM at 256 threads or fewer: the 128 registers an 8x8 tile needs). */
static void annotate(gg *g)
{
    LLVMValueRef fnv = g->fn;
    const char *keys[2] = {"maxntidx", "minctasm"};
    int vals[2] = {g->T, g->s->min_blocks > 0 ? g->s->min_blocks : g->T <= 256 ? 2 : 1};
    for (int i = 0; i < 2; i++) {
        LLVMValueRef ops[3] = {fnv, LLVMMDStringInContext(g->e.ctx, keys[i], (unsigned)strlen(keys[i])), ki32(g, vals[i])};
        LLVMAddNamedMetadataOperand(g->e.mod, "nvvm.annotations", LLVMMDNodeInContext(g->e.ctx, ops, 3));
    }
}

bool cg_llvm_compile_ptx_gemm(const cg_ptx_gemm_spec *s, char **ptx, size_t *ptx_size, char *err, size_t cap);
bool cg_llvm_compile_ptx_gemm(const cg_ptx_gemm_spec *s, char **ptx, size_t *ptx_size, char *err, size_t cap)
{
    if (ptx)
        *ptx = NULL;
    if (ptx_size)
        *ptx_size = 0;
    if (!ptx || !s)
        return cg_failf(err, cap, "compile_ptx_gemm: no spec or output");
    if (s->sm < 70)
        return cg_failf(err, cap, "compile_ptx_gemm: compute capability %d.%d is below 7.0", s->sm / 10, s->sm % 10);
    if (s->dt != BURNC_DTYPE_F32 && s->dt != BURNC_DTYPE_F64 && s->dt != BURNC_DTYPE_F16 && s->dt != BURNC_DTYPE_BF16)
        return cg_failf(err, cap, "compile_ptx_gemm: dtype %d is not a float dtype", (int)s->dt);
    if (!cg_ptx_gemm_shape_ok(s) || s->a_mode < 0 || s->a_mode > 3 || s->b_mode < 0 || s->b_mode > 3)
        return cg_failf(err, cap, "compile_ptx_gemm: tile %dx%dx%d with %dx%d per thread (modes %d, %d) is not supported",
                        s->bm, s->bn, s->bk, s->tm, s->tn, s->a_mode, s->b_mode);
    if (s->epi && (!cg_check_kernel(s->epi, "compile_ptx_gemm epilogue", err, cap)))
        return false;
    if (s->epi && !cg_ptx_gemm_epilogue_ok(s->epi, s->epi_c_slot))
        return cg_failf(err, cap, "compile_ptx_gemm: epilogue %s cannot run at the store", s->epi->name);
    gg g = {.e = {.k = s->epi}, .s = s, .epi = s->epi};
    g.v = cg_ptx_gemm_vec(s->dt);
    g.T = cg_ptx_gemm_threads(s);
    g.es = s->dt == BURNC_DTYPE_F64 ? 8 : 4;
    g.ld_a = s->bm + cg_ptx_gemm_pad(s->dt);
    g.ld_b = s->bn + cg_ptx_gemm_pad(s->dt);
    if (s->epi) {
        g.lay = cg_ptx_params_layout(s->epi);
        if (CG_GEMM_W_EPI + g.lay.n_words + CG_GEMM_HOST_WORDS > CG_PTX_MAX_PARAM_WORDS)
            return cg_failf(err, cap, "compile_ptx_gemm: the epilogue needs too many parameter words");
    }
    LLVMTargetMachineRef tm = s->host ? cg_host_tm(err, cap) : cg_nvptx_tm(s->sm, false, "compile_ptx_gemm", err, cap);
    if (!tm)
        return false;
    cg_module_begin(&g.e, tm, s->host ? cg_host_triple() : CG_NVPTX_TRIPLE, "burnc_gemm");
    g.t_gptr = LLVMPointerTypeInContext(g.e.ctx, s->host ? 0 : 1);
    g.t_sptr = LLVMPointerTypeInContext(g.e.ctx, s->host ? 0 : 3);
    g.ct = s->dt == BURNC_DTYPE_F64 ? g.e.t_f64 : g.e.t_f32;
    g.mt = cg_mem_ty(&g.e, s->dt);
    g.md_inv = LLVMGetMDKindIDInContext(g.e.ctx, "invariant.load", 14);
    if (!s->host) {
        LLVMTypeRef sh_t = LLVMArrayType2(g.e.t_i8, 0);
        g.smem = LLVMAddGlobalInAddressSpace(g.e.mod, sh_t, "burnc_gemm_smem", 3);
        LLVMSetLinkage(g.smem, LLVMExternalLinkage);
        LLVMSetAlignment(g.smem, 16);
    }
    g.async = s->async_mn && !s->host && s->sm >= 80 && s->dt == BURNC_DTYPE_F32 &&
              (s->a_mode == CG_GEMM_VEC_MN || s->b_mode == CG_GEMM_VEC_MN);
    bool ok = build(&g);
    if (!ok)
        cg_failf(err, cap, "compile_ptx_gemm: out of memory while building the IR");
    else if (!s->host)
        annotate(&g);
    ok = ok && cg_emit_module(g.e.mod, tm, "default<O3>", s->host, "compile_ptx_gemm", ptx, ptx_size, err, cap);
    cg_module_end(&g.e, tm);
    return ok;
}
