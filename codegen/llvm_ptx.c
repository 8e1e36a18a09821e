/* The PTX code generator: kernel IR -> LLVM IR for NVPTX -> default<O3> with the target
 * machine -> PTX text (codegen/ptx.h is the contract with the CUDA runtime, ptx_plan.c the
 * launches that go with the entries emitted here).
 *
 * Part of the burnc-llvm module, like llvm_cpu.c, whose per-instruction lowering (llvm_emit.c:
 * types, conversions, f16/bf16 in integer code, division, compares, combiners) it uses at one
 * lane: the same LLVM instructions give the same IEEE results on the GPU, where NVPTX turns them
 * into .rn arithmetic (never contracted by ptxas) and no .ftz, as long as the target machine
 * keeps the C API's default options (no unsafe-fp-math, no fast FP-op fusion). Float remainder
 * is the exception: NVPTX expands frem as x - trunc(x / y) * y, so it is written out exactly
 * here.
 *
 * Code shape. Every entry takes one byval block of 8-byte words (ptx.h's layout). Values are
 * emitted per "site" (one position, or a row for row-level values) from scratch, memoized within
 * the site; O3 hoists what does not depend on the position out of the loops. Inputs that no
 * output overwrites are loaded with !invariant.load, which NVPTX turns into ld.global.nc.
 * Loops over a row's positions issue the loads of several positions before using any
 * (positions()), and rows that fit go through shared memory, so a row is read once. */
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "codegen/llvm_emit.h"
#include "codegen/llvm_host.h"
#include "codegen/ptx.h"

enum { W = KIR_LANES, LEAF_SHIFT = 12, STACK_DEPTH = 64 };
_Static_assert(KIR_LEAF == 1 << LEAF_SHIFT, "leaf size is a power of two");

typedef struct gen {
    cg_emit e;          /* what the shared lowering (llvm_emit.c) needs */
    LLVMTypeRef t_gptr; /* a pointer to global memory */
    unsigned md_invariant;
    int items, rows_per_block, block, sm;
    int cols_shift;   /* log2 of the column entry's rows per block (cg_ptx_cols) */
    int cols_threads; /* ... and its threads (cg_ptx_cols_threads) */
    bool writable_input[KIR_MAX_INPUTS]; /* overwritten in place by an output: no .nc loads */
    cg_ptx_layout lay;
    /* shared memory of the block-per-row entry: a chunk's leaf records, the binary-counter
     * stack of chunk results, the stage result */
    LLVMValueRef sh_leaf, sh_stack, sh_res;
    /* ... and of the column entry: the lanes' records of each row, each row's stack, results */
    LLVMValueRef sh_cols, sh_cstack, sh_cres;
    bool cached[KIR_MAX_INPUTS]; /* kept in shared memory by the shared-memory row entry */
    bool kept[KIR_MAX_STAGES];   /* stages whose values that entry keeps there */
    int alias[KIR_MAX_STAGES];   /* ... over the row of this input (-1: a region of their own) */
    LLVMValueRef sh_dyn;         /* that entry's dynamic shared memory */
    int fast_slot;               /* that entry's stage 0 during the copy (fast_stage): the input, or -1 */
    int *readback;               /* [n_insts]: the output an early element store keeps the value in, or -1
                                    (early_stores); NULL when the kernel has none */
    LLVMValueRef sh_part;        /* ... the warps' partial results */
    const cg_ptx_luts *luts;     /* the kernel's 16-bit tables (cg_ptx_lut), or NULL */
    const cg_ptx_lut *lut_of[KIR_MAX_OUTPUTS]; /* per store: its table, or NULL */
    LLVMValueRef lut_data[KIR_MAX_OUTPUTS];    /* ... and that table in the module */
} gen;

/* ---- Float remainder, exactly -------------------------------------------------------------
 * C fmod is exact: with |x| = mx 2^ex and |y| = my 2^ey (integer significands), the result is
 * (mx 2^(ex-ey) mod my) 2^ey with x's sign. The shift-and-subtract loop runs ex - ey times (at
 * most ~2100 for f64, one step per bit), in its own blocks. */
static LLVMValueRef exact_fmod(gen *g, LLVMValueRef fn, int t, LLVMValueRef x, LLVMValueRef y)
{
    LLVMBuilderRef b = g->e.b;
    bool d = t == KIR_F64;
    int mant = d ? 52 : 23, bias = d ? 1023 : 127;
    LLVMTypeRef it = d ? g->e.t_i64 : g->e.t_i32, ft = cg_ty_of(&g->e, t);
    LLVMValueRef xb = LLVMBuildBitCast(b, x, it, ""), yb = LLVMBuildBitCast(b, y, it, "");
    uint64_t absmask = d ? INT64_MAX : INT32_MAX;
    LLVMValueRef ax = LLVMBuildAnd(b, xb, LLVMConstInt(it, absmask, 0), "");
    LLVMValueRef ay = LLVMBuildAnd(b, yb, LLVMConstInt(it, absmask, 0), "");
    LLVMValueRef sign = LLVMBuildXor(b, xb, ax, "");
    /* significand and exponent of a finite magnitude, as i64 (subnormals: exponent 1 - bias) */
    LLVMValueRef ex, ey, mx, my;
    {
        LLVMValueRef parts[2][2];
        LLVMValueRef src[2] = {ax, ay};
        for (int i = 0; i < 2; i++) {
            LLVMValueRef v = LLVMBuildZExt(b, src[i], g->e.t_i64, "");
            LLVMValueRef e = LLVMBuildLShr(b, v, LLVMConstInt(g->e.t_i64, (unsigned)mant, 0), "");
            LLVMValueRef f = LLVMBuildAnd(b, v, LLVMConstInt(g->e.t_i64, (UINT64_C(1) << mant) - 1, 0), "");
            LLVMValueRef sub = LLVMBuildICmp(b, LLVMIntEQ, e, LLVMConstInt(g->e.t_i64, 0, 0), "");
            parts[i][0] = LLVMBuildSelect(b, sub, LLVMConstInt(g->e.t_i64, 1, 0), e, "");
            parts[i][1] =
                LLVMBuildSelect(b, sub, f, LLVMBuildOr(b, f, LLVMConstInt(g->e.t_i64, UINT64_C(1) << mant, 0), ""), "");
        }
        ex = parts[0][0], mx = parts[0][1], ey = parts[1][0], my = parts[1][1];
    }
    LLVMValueRef inf = LLVMConstInt(it, d ? UINT64_C(0x7ff0000000000000) : 0x7f800000u, 0);
    LLVMValueRef nan_case = LLVMBuildOr(b, LLVMBuildICmp(b, LLVMIntUGE, ax, inf, ""),
                                        LLVMBuildOr(b, LLVMBuildICmp(b, LLVMIntUGT, ay, inf, ""),
                                                    LLVMBuildICmp(b, LLVMIntEQ, ay, LLVMConstInt(it, 0, 0), ""), ""),
                                        "");
    LLVMValueRef small = LLVMBuildICmp(b, LLVMIntULT, ax, ay, ""); /* also y infinite, x finite */
    LLVMValueRef easy = LLVMBuildOr(b, nan_case, small, "");

    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(g->e.ctx, fn, "fmod_loop");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->e.ctx, fn, "fmod_done");
    LLVMValueRef steps = LLVMBuildSub(b, ex, ey, "");
    LLVMValueRef r0 = LLVMBuildURem(b, mx, LLVMBuildSelect(b, easy, LLVMConstInt(g->e.t_i64, 1, 0), my, ""), "");
    LLVMBuildCondBr(b, LLVMBuildOr(b, easy, LLVMBuildICmp(b, LLVMIntEQ, steps, LLVMConstInt(g->e.t_i64, 0, 0), ""), ""),
                    done, loop);

    LLVMPositionBuilderAtEnd(b, loop);
    LLVMValueRef r = LLVMBuildPhi(b, g->e.t_i64, ""), n = LLVMBuildPhi(b, g->e.t_i64, "");
    LLVMValueRef r2 = LLVMBuildShl(b, r, LLVMConstInt(g->e.t_i64, 1, 0), "");
    r2 = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGE, r2, my, ""), LLVMBuildSub(b, r2, my, ""), r2, "");
    LLVMValueRef n2 = LLVMBuildSub(b, n, LLVMConstInt(g->e.t_i64, 1, 0), "");
    LLVMValueRef incoming[2] = {r0, r2}, counts[2] = {steps, n2};
    LLVMBasicBlockRef from[2] = {pre, loop};
    LLVMAddIncoming(r, incoming, from, 2);
    LLVMAddIncoming(n, counts, from, 2);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, n2, LLVMConstInt(g->e.t_i64, 0, 0), ""), done, loop);

    LLVMPositionBuilderAtEnd(b, done);
    LLVMValueRef rf = LLVMBuildPhi(b, g->e.t_i64, "");
    LLVMValueRef rin[2] = {r0, r2};
    LLVMAddIncoming(rf, rin, from, 2);
    /* rf 2^(ey - bias - mant) is below |y|, so representable; f32 scales in f64, where every
     * such power of two is normal */
    LLVMValueRef e2 = LLVMBuildSub(b, ey, LLVMConstInt(g->e.t_i64, (unsigned)(bias + mant), 0), "");
    LLVMValueRef res;
    if (d) {
        /* 2^e2 with e2 in [-1074, 971]: normal bits, or a subnormal's single bit */
        LLVMValueRef normal = LLVMBuildICmp(b, LLVMIntSGE, e2, LLVMConstInt(g->e.t_i64, (uint64_t)-1022, 1), "");
        LLVMValueRef nb = LLVMBuildShl(b, LLVMBuildAdd(b, e2, LLVMConstInt(g->e.t_i64, 1023, 0), ""),
                                       LLVMConstInt(g->e.t_i64, 52, 0), "");
        LLVMValueRef sb = LLVMBuildShl(b, LLVMConstInt(g->e.t_i64, 1, 0),
                                       LLVMBuildAdd(b, e2, LLVMConstInt(g->e.t_i64, 1074, 0), ""), "");
        LLVMValueRef p2 = LLVMBuildBitCast(b, LLVMBuildSelect(b, normal, nb, sb, ""), g->e.t_f64, "");
        /* the exact product is representable, so the multiply returns it even when 2^e2 is
         * subnormal */
        res = LLVMBuildFMul(b, LLVMBuildUIToFP(b, rf, g->e.t_f64, ""), p2, "");
    } else {
        LLVMValueRef p2 = LLVMBuildBitCast(b,
                                           LLVMBuildShl(b, LLVMBuildAdd(b, e2, LLVMConstInt(g->e.t_i64, 1023, 0), ""),
                                                        LLVMConstInt(g->e.t_i64, 52, 0), ""),
                                           g->e.t_f64, "");
        res = LLVMBuildFPTrunc(b, LLVMBuildFMul(b, LLVMBuildUIToFP(b, rf, g->e.t_f64, ""), p2, ""), g->e.t_f32, "");
    }
    res = LLVMBuildBitCast(b, LLVMBuildOr(b, LLVMBuildBitCast(b, res, it, ""), sign, ""), ft, "");
    res = LLVMBuildSelect(b, small, x, res, "");
    return LLVMBuildSelect(b, nan_case, cg_kfp(&g->e, t, NAN, 1), res, "");
}

/* ---- Entries: parameters, sites ---------------------------------------------------------- */

typedef struct ent {
    gen *g;
    LLVMValueRef fn, params;
    LLVMBuilderRef ab; /* allocas, at the top of the entry block */
    LLVMValueRef ext[BURNC_MAX_RANK], row_len;
    LLVMValueRef in_base[KIR_MAX_INPUTS], out_base[KIR_MAX_OUTPUTS];
    LLVMValueRef lane, tid;
    bool smem;                               /* cached inputs are read from shared memory */
    LLVMValueRef smem_base[KIR_MAX_INPUTS]; /* their rows there */
    LLVMValueRef kept_base[KIR_MAX_STAGES]; /* the kept stages' values there */
    bool kept_ready[KIR_MAX_STAGES];        /* ... once written: later phases read them */
    LLVMValueRef fast_val;                  /* stage 0 as the copy found it (fast_slot) */
    bool stored;                            /* the early element stores are done (g->readback) */
    bool cols;                              /* the column entry */
} ent;

/* One row (or, element-wise, one position): its outer indices and the slots' offsets there. */
typedef struct rowc {
    LLVMValueRef idx[BURNC_MAX_RANK];
    LLVMValueRef in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
    LLVMValueRef reduced[KIR_MAX_STAGES];
} rowc;

/* One position of a row: j (NULL for row-level values), the reduced indices, full offsets.
 * The fast element-wise path instead takes loads from vectors (vin) at lane `item`. */
typedef struct site {
    ent *e;
    rowc *r;
    LLVMValueRef idx[BURNC_MAX_RANK];
    LLVMValueRef in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
    LLVMValueRef *vin; /* [n_inputs] or NULL */
    int item;
    LLVMValueRef *val; /* memo, [n_insts] */
    LLVMValueRef j;    /* the position in the row (NULL: row-level) */
    LLVMValueRef raw;  /* a value a group's first pass leaves for its second */
} site;

static LLVMValueRef ki64(gen *g, int64_t v) { return LLVMConstInt(g->e.t_i64, (unsigned long long)v, 1); }
static LLVMValueRef ki32(gen *g, int v) { return LLVMConstInt(g->e.t_i32, (unsigned long long)v, 1); }

static LLVMValueRef word(ent *e, int i)
{
    gen *g = e->g;
    LLVMValueRef ix = ki64(g, i);
    LLVMValueRef v = LLVMBuildLoad2(g->e.b, g->e.t_i64, LLVMBuildGEP2(g->e.b, g->e.t_i64, e->params, &ix, 1, ""), "");
    LLVMSetAlignment(v, 8);
    return v;
}

static LLVMValueRef launch_word(ent *e, int i) { return word(e, e->g->lay.launch + i); }

static LLVMValueRef sreg(gen *g, const char *which)
{
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.read.ptx.sreg.%s", which);
    return LLVMBuildZExt(g->e.b, cg_call_intrinsic(&g->e, name, NULL, 0, NULL, 0), g->e.t_i64, "");
}

static LLVMValueRef gptr(gen *g, LLVMValueRef addr) { return LLVMBuildIntToPtr(g->e.b, addr, g->t_gptr, ""); }

static LLVMBasicBlockRef block(ent *e, const char *name)
{
    return LLVMAppendBasicBlockInContext(e->g->e.ctx, e->fn, name);
}

static LLVMValueRef entry_alloca(ent *e, LLVMTypeRef t) { return LLVMBuildAlloca(e->ab, t, ""); }

/* Starts an entry: one byval parameter of the layout's words, kernel calling convention. */
static void ent_begin(gen *g, ent *e, const char *name)
{
    memset(e, 0, sizeof *e);
    e->g = g;
    LLVMTypeRef fty = LLVMFunctionType(g->e.t_void, &g->e.t_ptr, 1, 0);
    e->fn = LLVMAddFunction(g->e.mod, name, fty);
    LLVMSetFunctionCallConv(e->fn, LLVMPTXKernelCallConv);
    LLVMTypeRef blk = LLVMArrayType2(g->e.t_i64, (uint64_t)g->lay.n_words);
    unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5), align = LLVMGetEnumAttributeKindForName("align", 5);
    LLVMAddAttributeAtIndex(e->fn, 1, LLVMCreateTypeAttribute(g->e.ctx, byval, blk));
    LLVMAddAttributeAtIndex(e->fn, 1, LLVMCreateEnumAttribute(g->e.ctx, align, 8));
    unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
    LLVMAddAttributeAtIndex(e->fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(g->e.ctx, nounwind, 0));
    e->params = LLVMGetParam(e->fn, 0);
    LLVMPositionBuilderAtEnd(g->e.b, block(e, "entry"));
    e->ab = LLVMCreateBuilderInContext(g->e.ctx);
    LLVMValueRef mark = LLVMBuildAlloca(g->e.b, g->e.t_i8, "");
    cg_ptx_grid_dependency(g->e.ctx, g->e.b, g->sm);
    LLVMPositionBuilderBefore(e->ab, mark);
    const kir_kernel *k = g->e.k;
    e->row_len = ki64(g, 1);
    for (int d = 0; d < k->rank; d++) {
        e->ext[d] = word(e, g->lay.extents + d);
        if (d >= k->n_outer)
            e->row_len = LLVMBuildMul(g->e.b, e->row_len, e->ext[d], "");
    }
    for (int s = 0; s < k->n_inputs; s++)
        e->in_base[s] = word(e, g->lay.in_addr + s);
    for (int s = 0; s < k->n_outputs; s++)
        e->out_base[s] = word(e, g->lay.out_addr + s);
    e->tid = sreg(g, "tid.x");
    e->lane = LLVMBuildAnd(g->e.b, e->tid, ki64(g, W - 1), "");
}

static void ent_end(ent *e)
{
    LLVMBuildRetVoid(e->g->e.b);
    LLVMDisposeBuilder(e->ab);
}

/* A slot's stride along axis d as a value (NULL: ZERO). */
static LLVMValueRef stride(ent *e, bool out, int s, int d)
{
    gen *g = e->g;
    const kir_slot *sl = out ? &g->e.k->outputs[s] : &g->e.k->inputs[s];
    if (sl->stride[d] == KIR_STRIDE_ZERO)
        return NULL;
    if (sl->stride[d] == KIR_STRIDE_UNIT)
        return ki64(g, 1);
    int base = out ? g->lay.out_stride : g->lay.in_stride;
    return word(e, base + s * g->e.k->rank + d);
}

/* Positions along axes [from, to) of `flat` (row-major). */
static void decompose(ent *e, LLVMValueRef flat, int from, int to, LLVMValueRef *idx)
{
    LLVMBuilderRef b = e->g->e.b;
    for (int d = to - 1; d >= from; d--) {
        if (d == from) {
            idx[d] = flat;
            break;
        }
        LLVMValueRef q = LLVMBuildUDiv(b, flat, e->ext[d], "");
        idx[d] = LLVMBuildSub(b, flat, LLVMBuildMul(b, q, e->ext[d], ""), "");
        flat = q;
    }
}

/* off + sum over axes [from, to) of idx * stride, for every slot. */
static void add_offsets(ent *e, const LLVMValueRef *idx, int from, int to, const LLVMValueRef *in0,
                        const LLVMValueRef *out0, LLVMValueRef *in, LLVMValueRef *out)
{
    gen *g = e->g;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? g->e.k->n_outputs : g->e.k->n_inputs;
        for (int s = 0; s < n; s++) {
            LLVMValueRef off = pass ? out0[s] : in0[s];
            for (int d = from; d < to; d++) {
                LLVMValueRef st = stride(e, pass, s, d);
                if (st)
                    off = LLVMBuildAdd(g->e.b, off, LLVMBuildMul(g->e.b, idx[d], st, ""), "");
            }
            (pass ? out : in)[s] = off;
        }
    }
}

/* Row r at outer indices idx: the slots' offsets there. */
static void row_at(ent *e, rowc *r, const LLVMValueRef *idx)
{
    gen *g = e->g;
    const kir_kernel *k = g->e.k;
    memset(r, 0, sizeof *r);
    memcpy(r->idx, idx, sizeof r->idx);
    LLVMValueRef in0[KIR_MAX_INPUTS], out0[KIR_MAX_OUTPUTS];
    for (int s = 0; s < k->n_inputs; s++)
        in0[s] = word(e, g->lay.in_off + s);
    for (int s = 0; s < k->n_outputs; s++)
        out0[s] = word(e, g->lay.out_off + s);
    add_offsets(e, r->idx, 0, k->n_outer, in0, out0, r->in_off, r->out_off);
}

static void row_begin(ent *e, rowc *r, LLVMValueRef row)
{
    LLVMValueRef idx[BURNC_MAX_RANK] = {0};
    decompose(e, row, 0, e->g->e.k->n_outer, idx);
    row_at(e, r, idx);
}

/* The indices of the next flat position: the innermost axis steps and wraps into the next
 * (a compare per axis instead of a division). */
static void step_index(ent *e, LLVMValueRef *idx, int rank)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef carry = ki64(g, 1);
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = LLVMBuildAdd(b, idx[d], carry, "");
        if (d == 0)
            break;
        LLVMValueRef wrap = LLVMBuildICmp(b, LLVMIntEQ, idx[d], e->ext[d], "");
        idx[d] = LLVMBuildSelect(b, wrap, ki64(g, 0), idx[d], "");
        carry = LLVMBuildZExt(b, wrap, g->e.t_i64, "");
    }
}

/* A site at reduced position j of row r (j NULL: the row itself). The caller frees val. */
static bool site_begin(ent *e, rowc *r, LLVMValueRef j, site *s)
{
    const kir_kernel *k = e->g->e.k;
    memset(s, 0, sizeof *s);
    s->e = e;
    s->r = r;
    s->val = calloc((size_t)(k->n_insts > 0 ? k->n_insts : 1), sizeof *s->val);
    s->j = j;
    memcpy(s->idx, r->idx, sizeof s->idx);
    if (j && k->n_outer < k->rank) {
        decompose(e, j, k->n_outer, k->rank, s->idx);
        add_offsets(e, s->idx, k->n_outer, k->rank, r->in_off, r->out_off, s->in_off, s->out_off);
    } else {
        /* row-level values never depend on reduced positions (kir_valid): 0 keeps a kernel
         * that breaks the rule from reaching LLVM with a missing operand */
        for (int d = k->n_outer; d < k->rank; d++)
            s->idx[d] = ki64(e->g, 0);
        memcpy(s->in_off, r->in_off, sizeof s->in_off);
        memcpy(s->out_off, r->out_off, sizeof s->out_off);
    }
    return s->val != NULL;
}

/* ---- Values ------------------------------------------------------------------------------ */

static LLVMValueRef load_mem(gen *g, LLVMValueRef base, LLVMValueRef off, LLVMTypeRef mt, LLVMTypeRef lt,
                             unsigned align, bool invariant)
{
    LLVMValueRef p = LLVMBuildGEP2(g->e.b, mt, gptr(g, base), &off, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(g->e.b, lt, p, "");
    LLVMSetAlignment(v, align);
    if (invariant)
        LLVMSetMetadata(v, g->md_invariant, LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, NULL, 0)));
    return v;
}

static LLVMValueRef load_input(site *s, int slot)
{
    ent *e = s->e;
    gen *g = e->g;
    burnc_dtype_t dt = g->e.k->inputs[slot].dtype;
    LLVMValueRef raw;
    if (s->vin && s->vin[slot] && g->items == 1)
        raw = s->vin[slot];
    else if (s->vin && s->vin[slot])
        raw = LLVMBuildExtractElement(g->e.b, s->vin[slot], ki32(g, s->item), "");
    else if (e->smem && g->cached[slot] && s->j) {
        LLVMValueRef p = LLVMBuildGEP2(g->e.b, cg_mem_ty(&g->e, dt), e->smem_base[slot], &s->j, 1, "");
        raw = LLVMBuildLoad2(g->e.b, cg_mem_ty(&g->e, dt), p, "");
        LLVMSetAlignment(raw, cg_mem_align(dt));
    } else
        raw = load_mem(g, e->in_base[slot], s->in_off[slot], cg_mem_ty(&g->e, dt), cg_mem_ty(&g->e, dt),
                       cg_mem_align(dt), !g->writable_input[slot]);
    return cg_from_mem(&g->e, raw, dt, 1);
}

/* kir_scalar bits -> a value of type t (KIR_ARG's rules). */
static LLVMValueRef scalar_of(gen *g, LLVMValueRef u, int t)
{
    if (t_fp(t)) {
        LLVMValueRef d = LLVMBuildBitCast(g->e.b, u, g->e.t_f64, "");
        return t == KIR_F32 ? LLVMBuildFPTrunc(g->e.b, d, g->e.t_f32, "") : d;
    }
    if (t == KIR_BOOL)
        return LLVMBuildICmp(g->e.b, LLVMIntNE, u, ki64(g, 0), "");
    return t == KIR_I64 || t == KIR_U64 ? u : LLVMBuildTrunc(g->e.b, u, cg_ty_of(&g->e, t), "");
}

static LLVMValueRef ev(site *s, int i)
{
    if (s->val[i])
        return s->val[i];
    ent *e = s->e;
    gen *g = e->g;
    const kir_inst *in = &g->e.k->insts[i];
    int t = in->type;
    LLVMValueRef v;
    if (e->stored && s->j && g->readback[i] >= 0) {
        int o = g->readback[i];
        burnc_dtype_t dt = g->e.k->outputs[o].dtype; /* the value's own type (early_stores) */
        v = load_mem(g, e->out_base[o], s->out_off[o], cg_mem_ty(&g->e, dt), cg_mem_ty(&g->e, dt), cg_mem_align(dt),
                     false);
        return s->val[i] = v;
    }
    for (int st = 0; e->smem && s->j && st < g->e.k->n_stages; st++)
        if (e->kept_ready[st] && g->e.k->stages[st].value == i) {
            LLVMValueRef p = LLVMBuildGEP2(g->e.b, cg_ty_of(&g->e, t), e->kept_base[st], &s->j, 1, "");
            v = LLVMBuildLoad2(g->e.b, cg_ty_of(&g->e, t), p, "");
            LLVMSetAlignment(v, (unsigned)cg_ptx_kept_size(t));
            return s->val[i] = v;
        }
    switch (in->op) {
    case KIR_LOAD: v = load_input(s, in->a); break;
    case KIR_CONST:
        v = t_fp(t) ? cg_kfp(&g->e, t, in->imm.f, 1)
                    : kint(cg_ty_of(&g->e, t), t == KIR_BOOL ? in->imm.u != 0 : in->imm.u, 1);
        break;
    case KIR_ARG: v = scalar_of(g, word(e, g->lay.scalars + in->a), t); break;
    case KIR_INDEX: v = s->idx[in->a]; break;
    case KIR_EXTENT: v = e->ext[in->a]; break;
    case KIR_ROW_LEN: v = e->row_len; break;
    case KIR_REDUCED: v = s->r->reduced[in->a]; break;
    default: {
        LLVMValueRef a = ev(s, in->a);
        int ta = g->e.k->insts[in->a].type;
        if (kir_n_operands(in->op) == 1) {
            v = cg_unary(&g->e, in, ta, a, 1);
            break;
        }
        LLVMValueRef bb = ev(s, in->b);
        if (in->op >= KIR_EQ && in->op <= KIR_GE)
            v = cg_compare(&g->e, in->op, ta, a, bb);
        else if (in->op == KIR_REM && t_fp(t))
            v = exact_fmod(g, e->fn, t, a, bb);
        else if (kir_n_operands(in->op) == 2)
            v = cg_binary(&g->e, in->op, t, a, bb, 1);
        else if (in->op == KIR_SELECT)
            v = LLVMBuildSelect(g->e.b, a, bb, ev(s, in->c), "");
        else {
            LLVMValueRef args[3] = {a, bb, ev(s, in->c)};
            LLVMTypeRef ft = LLVMTypeOf(a);
            v = cg_call_intrinsic(&g->e, "llvm.fma", &ft, 1, args, 3);
        }
    }
    }
    s->val[i] = v;
    return v;
}

static void store_mem(gen *g, LLVMValueRef base, LLVMValueRef off, LLVMTypeRef mt, LLVMValueRef v, unsigned align)
{
    LLVMValueRef p = LLVMBuildGEP2(g->e.b, mt, gptr(g, base), &off, 1, "");
    LLVMSetAlignment(LLVMBuildStore(g->e.b, v, p), align);
}

/* Store st's value as its output's memory holds it: with a 16-bit table (cg_ptx_lut), the
 * table's entry at the source's 16 bits (bf16: an f32's top half; f16: the exact conversion),
 * read through the read-only path; else the value converted. */
static LLVMValueRef store_value(site *s, int st)
{
    gen *g = s->e->g;
    const kir_kernel *k = g->e.k;
    const kir_store *x = &k->stores[st];
    burnc_dtype_t dt = k->outputs[x->slot].dtype;
    const cg_ptx_lut *l = g->lut_of[st];
    if (!l)
        return cg_to_mem(&g->e, ev(s, x->value), k->insts[x->value].type, dt, 1);
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef v = ev(s, l->src), bits;
    if (l->src_dt == BURNC_DTYPE_BF16)
        bits = LLVMBuildLShr(b, LLVMBuildBitCast(b, v, g->e.t_i32, ""), ki32(g, 16), "");
    else
        bits = LLVMBuildZExt(b, LLVMBuildBitCast(b, LLVMBuildFPTrunc(b, v, LLVMHalfTypeInContext(g->e.ctx), ""),
                                                 g->e.t_i16, ""), g->e.t_i32, "");
    LLVMValueRef i = LLVMBuildZExt(b, bits, g->e.t_i64, "");
    LLVMTypeRef tys[2] = {g->e.t_i16, g->t_gptr};
    LLVMValueRef args[2] = {LLVMBuildGEP2(b, g->e.t_i16, g->lut_data[st], &i, 1, ""), ki32(g, 2)};
    return cg_call_intrinsic(&g->e, "llvm.nvvm.ldg.global.i", tys, 2, args, 2);
}

/* Which stores emit_stores emits: element stores, row stores (at the row's offsets), or all of
 * them (element-wise kernels, where a row is one position). */
enum { ST_ELEM, ST_ROW, ST_ALL };

/* The stores of one kind (ST_*) at site s, in the kernel's order. */
static void emit_stores(site *s, int which)
{
    ent *e = s->e;
    gen *g = e->g;
    const kir_kernel *k = g->e.k;
    for (int i = 0; i < k->n_stores; i++) {
        const kir_store *st = &k->stores[i];
        if ((which == ST_ELEM && st->row) || (which == ST_ROW && !st->row))
            continue;
        burnc_dtype_t dt = k->outputs[st->slot].dtype;
        LLVMValueRef v = store_value(s, i);
        LLVMValueRef off = which == ST_ROW ? s->r->out_off[st->slot] : s->out_off[st->slot];
        store_mem(g, e->out_base[st->slot], off, cg_mem_ty(&g->e, dt), v, cg_mem_align(dt));
    }
}

/* A counted loop over i = from, from + step, ... < end with its counter in an alloca; returns
 * the counter's value in the body. loop_end closes it. */
typedef struct loop {
    LLVMValueRef var, i;
    LLVMValueRef step;
    LLVMBasicBlockRef head, out;
    LLVMValueRef back; /* the back-edge branch, once closed */
} loop;

static void loop_begin(ent *e, loop *l, LLVMValueRef from, LLVMValueRef step, LLVMValueRef end)
{
    gen *g = e->g;
    l->var = entry_alloca(e, g->e.t_i64);
    l->step = step;
    LLVMBuildStore(g->e.b, from, l->var);
    l->head = block(e, "loop");
    LLVMBasicBlockRef body = block(e, "loop_body");
    l->out = block(e, "loop_out");
    LLVMBuildBr(g->e.b, l->head);
    LLVMPositionBuilderAtEnd(g->e.b, l->head);
    l->i = LLVMBuildLoad2(g->e.b, g->e.t_i64, l->var, "");
    LLVMBuildCondBr(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntULT, l->i, end, ""), body, l->out);
    LLVMPositionBuilderAtEnd(g->e.b, body);
}

static void loop_end(ent *e, loop *l)
{
    gen *g = e->g;
    LLVMBuildStore(g->e.b, LLVMBuildAdd(g->e.b, l->i, l->step, ""), l->var);
    l->back = LLVMBuildBr(g->e.b, l->head);
    LLVMPositionBuilderAtEnd(g->e.b, l->out);
}

/* Keeps the loop closed by branch br a loop: unrolling it would only grow the code. */
static void no_unroll(gen *g, LLVMValueRef br)
{
    LLVMMetadataRef self = LLVMTemporaryMDNode(g->e.ctx, NULL, 0);
    LLVMMetadataRef name = LLVMMDStringInContext2(g->e.ctx, "llvm.loop.unroll.disable", 24);
    LLVMMetadataRef ops[2] = {self, LLVMMDNodeInContext2(g->e.ctx, &name, 1)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(g->e.ctx, ops, 2);
    LLVMMetadataReplaceAllUsesWith(self, id);
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(g->e.ctx, "llvm.loop", 9), LLVMMetadataAsValue(g->e.ctx, id));
}

static LLVMValueRef umin64(gen *g, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntULT, a, b, ""), a, b, "");
}

/* ---- Positions in groups -----------------------------------------------------------------
 * A thread's positions first, first + step, ... < end go in groups of GROUP: every site of a
 * group runs `pre` (its loads) before any runs `body` (their uses), so GROUP loads per thread
 * are in flight at once (scripts/gpu/NOTES.md: the probe reached the read roofline with 8).
 * Bodies run in position order, so a reduction still combines in kernel.h's order; the last
 * positions, fewer than a group, go one at a time. Sites that divide their position into several
 * reduced indices, or carry an i64 position (ARG combiners), take groups of 4: 8 of them kept
 * 90 registers live (a block of 1024 threads has 64 each).
 * With group_ctx.prefetch (the column entry's lanes: 8 warps an SM in the deep MLP's GELU
 * backward, too few to hide a group's loads behind other warps) the next group's loads are
 * issued before this group's bodies run, in registers (PREFETCH_MAX): on the H200 that
 * kernel went 49-52 -> 41-43 us. The warp-per-row entry gained nothing from it. */
enum { GROUP = 8, WIDE_GROUP = 32 /* a cheap stage (wide_group) */ };

static int group_size(const kir_kernel *k, bool arg) { return arg || k->rank - k->n_outer > 1 ? GROUP / 2 : GROUP; }

/* The group of stage st's sites (an ARG combiner carries positions). */
static int stage_group(const kir_kernel *k, int st) { return group_size(k, is_arg_comb(k->stages[st].combiner)); }

typedef struct group_ctx {
    int group;        /* sites per group */
    const bool *need; /* instructions whose loads `pre` issues */
    int st, n_st;     /* the stages accumulated: st .. st + n_st - 1 (lane_acc; keep_body: st) */
    bool stores;      /* ... and the element stores at each position (lane_acc) */
    LLVMValueRef sacc[KIR_MAX_STAGES], saccp[KIR_MAX_STAGES]; /* their accumulators */
    LLVMValueRef acc; /* the fast stage's (copy_row) */
    int slot; /* the input copied */
    bool prefetch; /* the next group's loads go before this group's bodies (positions) */
} group_ctx;

typedef bool (*site_fn)(site *s, group_ctx *c);

static bool run_sites(site *s, int n, site_fn pre, site_fn body, group_ctx *c)
{
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && s[i].val != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = pre(&s[i], c);
    for (int i = 0; ok && i < n; i++)
        ok = body(&s[i], c);
    for (int i = 0; i < n; i++)
        free(s[i].val);
    return ok;
}

/* Loads positions() may issue a group ahead, in registers: at most this many a thread. */
enum { PREFETCH_MAX = 48 };

/* The instructions positions() loads a group ahead (c->prefetch): the needed global loads of
 * inputs no output overwrites, in an entry that reads nothing from shared memory or back from
 * its outputs, when a group's fit in PREFETCH_MAX registers (0: none). */
static int prefetchable(const ent *e, const group_ctx *c, int *out)
{
    const gen *g = e->g;
    const kir_kernel *k = g->e.k;
    int n = 0;
    if (!c->prefetch || e->smem || e->stored)
        return 0;
    for (int i = 0; i < k->n_insts; i++)
        if (c->need[i] && k->insts[i].op == KIR_LOAD && !g->writable_input[k->insts[i].a]) {
            if ((n + 1) * c->group > PREFETCH_MAX)
                return 0;
            out[n++] = i;
        }
    return n;
}

/* Group u's prefetchable loads at positions from, from + step, ... (clamped to end - 1, which
 * the caller guarantees is a position) into the allocas slots[u * np + p]. */
static bool prefetch_group(ent *e, rowc *r, LLVMValueRef from, LLVMValueRef step, LLVMValueRef end, int n,
                           const int *pf, int np, LLVMValueRef *slots)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef last = LLVMBuildSub(b, end, ki64(g, 1), "");
    for (int u = 0; u < n; u++) {
        site s;
        LLVMValueRef j = LLVMBuildAdd(b, from, LLVMBuildMul(b, step, ki64(g, u), ""), "");
        if (!site_begin(e, r, umin64(g, j, last), &s))
            return false;
        for (int q = 0; q < np; q++)
            LLVMBuildStore(b, ev(&s, pf[q]), slots[u * np + q]);
        free(s.val);
    }
    return true;
}

static bool positions(ent *e, rowc *r, LLVMValueRef first, LLVMValueRef step, LLVMValueRef end, site_fn pre,
                      site_fn body, group_ctx *c)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    int n = c->group, pf[PREFETCH_MAX], np = prefetchable(e, c, pf);
    LLVMValueRef slots[PREFETCH_MAX];
    bool ok = true;
    LLVMValueRef span = LLVMBuildMul(b, step, ki64(g, n - 1), "");
    for (int u = 0; u < n * np; u++)
        slots[u] = entry_alloca(e, cg_ty_of(&g->e, g->e.k->insts[pf[u % np]].type));
    if (np) { /* the first group's loads */
        LLVMBasicBlockRef c0 = cg_if_begin(&g->e, LLVMBuildICmp(b, LLVMIntULT, LLVMBuildAdd(b, first, span, ""), end, ""),
                                           "prefetch");
        ok = prefetch_group(e, r, first, step, end, n, pf, np, slots);
        cg_if_end(&g->e, c0);
    }
    LLVMValueRef var = entry_alloca(e, g->e.t_i64);
    LLVMBuildStore(b, first, var);
    LLVMBasicBlockRef head = block(e, "group"), body_bb = block(e, "group_body"), out = block(e, "group_out");
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef i = LLVMBuildLoad2(b, g->e.t_i64, var, "");
    LLVMValueRef last = LLVMBuildAdd(b, i, span, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, last, end, ""), body_bb, out);
    LLVMPositionBuilderAtEnd(b, body_bb);
    site s[WIDE_GROUP];
    for (int u = 0; u < n; u++) {
        site_begin(e, r, LLVMBuildAdd(b, i, LLVMBuildMul(b, step, ki64(g, u), ""), ""), &s[u]);
        for (int q = 0; q < np && s[u].val; q++)
            s[u].val[pf[q]] = LLVMBuildLoad2(b, cg_ty_of(&g->e, g->e.k->insts[pf[q]].type), slots[u * np + q], "");
    }
    LLVMValueRef next = LLVMBuildAdd(b, i, LLVMBuildMul(b, step, ki64(g, n), ""), "");
    if (np) /* the next group's loads (clamped to the row: the last ones only repeat) */
        ok = prefetch_group(e, r, next, step, end, n, pf, np, slots) && ok;
    ok = run_sites(s, n, pre, body, c) && ok;
    LLVMBuildStore(b, next, var);
    no_unroll(g, LLVMBuildBr(b, head));
    LLVMPositionBuilderAtEnd(b, out);
    loop l;
    loop_begin(e, &l, i, step, end);
    site_begin(e, r, l.i, &s[0]);
    ok = run_sites(s, 1, pre, body, c) && ok;
    loop_end(e, &l);
    no_unroll(g, l.back);
    return ok;
}

/* Whether entry e reads instruction i's values back from shared memory (a kept stage's, once
 * written) or from the output an early element store wrote it to, so evaluating it needs none
 * of its operands. */
static bool read_back(const ent *e, int i)
{
    if (e && e->stored && e->g->readback[i] >= 0)
        return true;
    for (int st = 0; e && e->smem && st < e->g->e.k->n_stages; st++)
        if (e->kept_ready[st] && e->g->e.k->stages[st].value == i)
            return true;
    return false;
}

/* Marks the roots and every instruction they depend on (operands come before their users) in
 * entry e, at its present point. NULL when out of memory. */
static bool *reach(const kir_kernel *k, const int32_t *roots, int n, const ent *e)
{
    bool *m = calloc((size_t)(k->n_insts > 0 ? k->n_insts : 1), sizeof *m);
    if (!m)
        return NULL;
    for (int i = 0; i < n; i++)
        m[roots[i]] = true;
    for (int i = k->n_insts - 1; i >= 0; i--) {
        if (!m[i] || read_back(e, i))
            continue;
        const kir_inst *in = &k->insts[i];
        int32_t o[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            m[o[j]] = true;
    }
    return m;
}

/* A group's loads: the inputs' elements, and the kept values read back. */
static bool pre_loads(site *s, group_ctx *c)
{
    const kir_kernel *k = s->e->g->e.k;
    for (int i = 0; i < k->n_insts; i++)
        if (c->need[i] && (k->insts[i].op == KIR_LOAD || read_back(s->e, i)))
            ev(s, i);
    return true;
}

/* ---- Element-wise ------------------------------------------------------------------------
 * Thread t owns positions [t * items, t * items + items). Fast path (the planner's flag: every
 * slot is contiguous over the flattened domain, its base aligned for the vector): one vector
 * load per input and one vector store per output (16 bytes at f32 x 4). Innermost path (the
 * planner's other flag, cg_ptx_has_inner: the thread's positions lie in one innermost row, the
 * vectors aligned): the slots' offsets once from the first position's indices, a vector per
 * unit-stride input and output, one element per input broadcast along the last axis. General
 * path (any other layout, and the domain's last thread): a loop over the thread's positions,
 * indices from one division chain and then stepped, offsets from the strides. */

/* A vector load of input s. O3's VectorCombine turns a vector load used only by
 * extractelement into scalar loads and drops !invariant.load on the way (LLVM 19: all inputs
 * but one lost ld.global.nc); the ldg intrinsic keeps the vector whole and non-coherent. It
 * takes 2 or 4 elements of up to 32 bits, 2 of 64. */
static LLVMValueRef load_vec(ent *e, int s, LLVMValueRef off, int n, unsigned align)
{
    gen *g = e->g;
    LLVMTypeRef et = cg_mem_ty(&g->e, g->e.k->inputs[s].dtype);
    LLVMTypeKind kind = LLVMGetTypeKind(et);
    bool fl = kind == LLVMFloatTypeKind || kind == LLVMDoubleTypeKind;
    unsigned bits = kind == LLVMFloatTypeKind ? 32 : kind == LLVMDoubleTypeKind ? 64 : LLVMGetIntTypeWidth(et);
    if (g->writable_input[s] || !(n == 2 || (n == 4 && bits <= 32)))
        return load_mem(g, e->in_base[s], off, et, vty(et, n), align, !g->writable_input[s]);
    LLVMTypeRef tys[2] = {vty(et, n), g->t_gptr};
    LLVMValueRef args[2] = {LLVMBuildGEP2(g->e.b, et, gptr(g, e->in_base[s]), &off, 1, ""), ki32(g, (int)align)};
    return cg_call_intrinsic(&g->e, fl ? "llvm.nvvm.ldg.global.f" : "llvm.nvvm.ldg.global.i", tys, 2, args, 2);
}

/* The vector paths: in_at[s] is input s's offset at the thread's first position when it is
 * loaded as a vector (NULL: loaded per item at its own offset, the same for every item when it
 * is broadcast), out_at[s] the output's. */
static bool ew_vec(ent *e, const LLVMValueRef *in_at, const LLVMValueRef *out_at, LLVMValueRef (*idx)[BURNC_MAX_RANK])
{
    gen *g = e->g;
    const kir_kernel *k = g->e.k;
    int n = g->items;
    bool ok = true;
    LLVMValueRef vin[KIR_MAX_INPUTS] = {0}, vout[KIR_MAX_OUTPUTS] = {0};
    for (int s = 0; s < k->n_inputs; s++) {
        if (!in_at[s])
            continue;
        burnc_dtype_t dt = k->inputs[s].dtype;
        unsigned size = cg_mem_align(dt), align = (unsigned)n * size > 16 ? 16 : (unsigned)n * size;
        vin[s] = load_vec(e, s, in_at[s], n, align);
    }
    for (int s = 0; s < k->n_outputs; s++)
        vout[s] = LLVMGetPoison(vty(cg_mem_ty(&g->e, k->outputs[s].dtype), n));
    for (int it = 0; it < n && ok; it++) {
        rowc r;
        row_at(e, &r, idx[it]);
        site si;
        ok = site_begin(e, &r, NULL, &si);
        si.vin = vin;
        si.item = it;
        for (int i = 0; ok && i < k->n_stores; i++) {
            const kir_store *st = &k->stores[i];
            LLVMValueRef v = store_value(&si, i);
            vout[st->slot] = n == 1 ? v : LLVMBuildInsertElement(g->e.b, vout[st->slot], v, ki32(g, it), "");
        }
        free(si.val);
    }
    for (int i = 0; i < k->n_stores; i++) {
        int s = k->stores[i].slot;
        if (!vout[s])
            continue;
        burnc_dtype_t dt = k->outputs[s].dtype;
        unsigned size = cg_mem_align(dt), align = (unsigned)n * size > 16 ? 16 : (unsigned)n * size;
        store_mem(g, e->out_base[s], out_at[s], cg_mem_ty(&g->e, dt), vout[s], align);
        vout[s] = NULL; /* one store per slot, of the last values */
    }
    return ok;
}

static bool emit_ew(gen *g)
{
    ent e;
    ent_begin(g, &e, CG_PTX_ENTRY_EW);
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef t = LLVMBuildAdd(b, LLVMBuildMul(b, sreg(g, "ctaid.x"), sreg(g, "ntid.x"), ""), e.tid, "");
    LLVMValueRef p0 = LLVMBuildMul(b, t, ki64(g, g->items), "");
    LLVMValueRef count = launch_word(&e, CG_PTX_L_COUNT);
    LLVMBasicBlockRef work = block(&e, "work"), fast = block(&e, "fast"), slow = block(&e, "slow"),
                      done = block(&e, "done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, p0, count, ""), work, done);
    LLVMPositionBuilderAtEnd(b, work);
    LLVMValueRef flag = LLVMBuildAnd(b, launch_word(&e, CG_PTX_L_FLAGS), ki64(g, CG_PTX_FLAG_FAST), "");
    LLVMValueRef whole = LLVMBuildICmp(b, LLVMIntULE, LLVMBuildAdd(b, p0, ki64(g, g->items), ""), count, "");
    /* every item's indices, from one division chain (unused ones are dead code) */
    LLVMValueRef idx[8][BURNC_MAX_RANK] = {{0}};
    decompose(&e, p0, 0, g->e.k->rank, idx[0]);
    for (int it = 1; it < g->items; it++) {
        memcpy(idx[it], idx[it - 1], sizeof idx[it]);
        step_index(&e, idx[it], g->e.k->rank);
    }
    LLVMBuildCondBr(b, LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntNE, flag, ki64(g, 0), ""), whole, ""), fast, slow);

    LLVMPositionBuilderAtEnd(b, fast);
    const kir_kernel *k = g->e.k;
    LLVMValueRef in_at[KIR_MAX_INPUTS] = {0}, out_at[KIR_MAX_OUTPUTS] = {0};
    for (int s = 0; s < k->n_inputs; s++)
        if (!cg_ptx_slot_uniform(k, &k->inputs[s]))
            in_at[s] = LLVMBuildAdd(b, word(&e, g->lay.in_off + s), p0, "");
    for (int s = 0; s < k->n_outputs; s++)
        out_at[s] = LLVMBuildAdd(b, word(&e, g->lay.out_off + s), p0, "");
    bool ok = ew_vec(&e, in_at, out_at, idx);
    LLVMBuildBr(b, done);

    if (cg_ptx_has_inner(k)) {
        LLVMBasicBlockRef inner = block(&e, "inner"), general = block(&e, "general");
        LLVMPositionBuilderAtEnd(b, slow);
        LLVMValueRef iflag = LLVMBuildAnd(b, launch_word(&e, CG_PTX_L_FLAGS), ki64(g, CG_PTX_FLAG_INNER), "");
        LLVMBuildCondBr(b, LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntNE, iflag, ki64(g, 0), ""), whole, ""), inner,
                        general);
        LLVMPositionBuilderAtEnd(b, inner);
        rowc r0;
        row_at(&e, &r0, idx[0]);
        for (int s = 0; s < k->n_inputs; s++)
            in_at[s] = k->inputs[s].stride[k->rank - 1] == KIR_STRIDE_UNIT ? r0.in_off[s] : NULL;
        /* the items step along the last axis only: their other indices, so the broadcast
         * inputs' offsets, are the first item's (one load each after CSE) */
        LLVMValueRef iidx[8][BURNC_MAX_RANK];
        for (int it = 0; it < g->items; it++) {
            memcpy(iidx[it], idx[0], sizeof iidx[it]);
            iidx[it][k->rank - 1] = LLVMBuildAdd(b, idx[0][k->rank - 1], ki64(g, it), "");
        }
        ok = ew_vec(&e, in_at, r0.out_off, iidx) && ok;
        LLVMBuildBr(b, done);
        slow = general;
    }

    /* the general path, a loop over the thread's positions: the indices step from one to the
     * next */
    LLVMPositionBuilderAtEnd(b, slow);
    LLVMValueRef at[BURNC_MAX_RANK];
    for (int d = 0; d < k->rank; d++) {
        at[d] = entry_alloca(&e, g->e.t_i64);
        LLVMBuildStore(b, idx[0][d], at[d]);
    }
    loop l;
    loop_begin(&e, &l, p0, ki64(g, 1), umin64(g, LLVMBuildAdd(b, p0, ki64(g, g->items), ""), count));
    LLVMValueRef cur[BURNC_MAX_RANK] = {0};
    for (int d = 0; d < k->rank; d++)
        cur[d] = LLVMBuildLoad2(b, g->e.t_i64, at[d], "");
    rowc r;
    row_at(&e, &r, cur);
    site s;
    ok = site_begin(&e, &r, NULL, &s) && ok;
    if (ok)
        emit_stores(&s, ST_ALL);
    free(s.val);
    step_index(&e, cur, k->rank);
    for (int d = 0; d < k->rank; d++)
        LLVMBuildStore(b, cur[d], at[d]);
    loop_end(&e, &l);
    no_unroll(g, l.back);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    ent_end(&e);
    return ok;
}

/* ---- Reductions --------------------------------------------------------------------------- */

/* shfl.sync.bfly of any value type, through 32-bit pieces. */
static LLVMValueRef shfl_xor(gen *g, LLVMValueRef v, int mask)
{
    LLVMBuilderRef b = g->e.b;
    LLVMTypeRef t = LLVMTypeOf(v);
    LLVMValueRef a[4] = {LLVMConstInt(g->e.t_i32, 0xffffffffu, 0), NULL, ki32(g, mask), ki32(g, 0x1f)};
    if (t == g->e.t_f32) {
        a[1] = v;
        return cg_call_intrinsic(&g->e, "llvm.nvvm.shfl.sync.bfly.f32", NULL, 0, a, 4);
    }
    if (t == g->e.t_i32) {
        a[1] = v;
        return cg_call_intrinsic(&g->e, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a, 4);
    }
    if (t == g->e.t_i1 || t == g->e.t_i8) {
        a[1] = LLVMBuildZExt(b, v, g->e.t_i32, "");
        return LLVMBuildTrunc(b, cg_call_intrinsic(&g->e, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a, 4), t, "");
    }
    LLVMValueRef x = t == g->e.t_f64 ? LLVMBuildBitCast(b, v, g->e.t_i64, "") : v;
    a[1] = LLVMBuildTrunc(b, x, g->e.t_i32, "");
    LLVMValueRef lo = cg_call_intrinsic(&g->e, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a, 4);
    a[1] = LLVMBuildTrunc(b, LLVMBuildLShr(b, x, ki64(g, 32), ""), g->e.t_i32, "");
    LLVMValueRef hi = cg_call_intrinsic(&g->e, "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0, a, 4);
    LLVMValueRef r = LLVMBuildOr(b, LLVMBuildZExt(b, lo, g->e.t_i64, ""),
                                 LLVMBuildShl(b, LLVMBuildZExt(b, hi, g->e.t_i64, ""), ki64(g, 32), ""), "");
    return t == g->e.t_f64 ? LLVMBuildBitCast(b, r, g->e.t_f64, "") : r;
}

/* kernel.h's pairwise tree over the 32 lanes of a warp, as 5 butterflies: at step m, lanes l
 * and l ^ m both combine (lower lane's value, upper lane's value), so every lane ends with the
 * tree's result (lane 0's is the tree of kernel.h, bitwise). */
static void warp_tree(ent *e, int comb, int t, LLVMValueRef *v, LLVMValueRef *p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    bool arg = is_arg_comb(comb);
    for (int m = 1; m < W; m *= 2) {
        LLVMValueRef ov = shfl_xor(g, *v, m), op = arg ? shfl_xor(g, *p, m) : NULL;
        LLVMValueRef low = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, e->lane, ki64(g, m), ""), ki64(g, 0), "");
        LLVMValueRef lv = LLVMBuildSelect(b, low, *v, ov, ""), rv = LLVMBuildSelect(b, low, ov, *v, "");
        LLVMValueRef lp = arg ? LLVMBuildSelect(b, low, *p, op, "") : NULL;
        LLVMValueRef rp = arg ? LLVMBuildSelect(b, low, op, *p, "") : NULL;
        cg_combine(&g->e, comb, t, lv, lp, rv, rp, v, p);
    }
}

static int stage_type(const kir_kernel *k, int s) { return k->insts[k->stages[s].value].type; }

/* Combines the values of stages c->st .. at site s into their accumulators (a position's turn
 * in the lane's order). */
static bool accumulate(site *s, group_ctx *c)
{
    gen *g = s->e->g;
    LLVMBuilderRef b = g->e.b;
    for (int q = 0; q < c->n_st; q++) {
        int st = c->st + q, comb = g->e.k->stages[st].combiner, t = stage_type(g->e.k, st);
        bool arg = is_arg_comb(comb);
        LLVMValueRef x = ev(s, g->e.k->stages[st].value), nv, np = NULL;
        LLVMValueRef cv = LLVMBuildLoad2(b, cg_ty_of(&g->e, t), c->sacc[q], "");
        LLVMValueRef cp = arg ? LLVMBuildLoad2(b, g->e.t_i64, c->saccp[q], "") : NULL;
        cg_combine(&g->e, comb, t, cv, cp, x, s->j, &nv, &np);
        if (s->e->smem && g->kept[st] && !s->e->kept_ready[st]) {
            LLVMValueRef p = LLVMBuildGEP2(b, cg_ty_of(&g->e, t), s->e->kept_base[st], &s->j, 1, "");
            LLVMSetAlignment(LLVMBuildStore(b, x, p), (unsigned)cg_ptx_kept_size(t));
        }
        LLVMBuildStore(b, nv, c->sacc[q]);
        if (arg)
            LLVMBuildStore(b, np, c->saccp[q]);
    }
    if (c->stores)
        emit_stores(s, ST_ELEM);
    return true;
}

/* The values a lane evaluates for stages st .. st + n_st - 1 at a position: the stages', and
 * with `stores` the element stores'; returns how many. */
static int stage_roots(const kir_kernel *k, int st, int n_st, bool stores,
                       int32_t roots[KIR_MAX_STAGES + KIR_MAX_OUTPUTS])
{
    int n = 0;
    for (int q = 0; q < n_st; q++)
        roots[n++] = k->stages[st + q].value;
    for (int i = 0; stores && i < k->n_stores; i++)
        if (!k->stores[i].row)
            roots[n++] = k->stores[i].value;
    return n;
}

/* How many of the instructions marked compute (not loads, constants or arguments). */
static int compute_cost(const kir_kernel *k, const bool *mark)
{
    int n = 0;
    for (int j = 0; j < k->n_insts; j++)
        n += mark[j] && k->insts[j].op != KIR_LOAD && k->insts[j].op != KIR_CONST && k->insts[j].op != KIR_ARG;
    return n;
}

/* One lane's part of stages st .. st + n - 1 in row r, from one evaluation a position:
 * positions first, first + 32, ... < end combined in order from the identity, loads in groups
 * of `group`; with `stores`, each position's element stores too (none may use the stages'
 * results). v[q], p[q]: stage st + q's. */
static bool lane_acc(ent *e, rowc *r, int st, int n, LLVMValueRef first, LLVMValueRef end, int group, bool stores,
                     LLVMValueRef *v, LLVMValueRef *p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    group_ctx c = {.group = group, .st = st, .n_st = n, .stores = stores};
    /* the column entry's lanes are few, so their loads go a group ahead (positions), where its
     * block leaves the registers for it (more threads than 256 would make ptxas spill them) */
    c.prefetch = e->cols && g->cols_threads <= 256;
    for (int q = 0; q < n; q++) {
        int comb = g->e.k->stages[st + q].combiner, t = stage_type(g->e.k, st + q);
        c.sacc[q] = entry_alloca(e, cg_ty_of(&g->e, t));
        c.saccp[q] = entry_alloca(e, g->e.t_i64);
        LLVMBuildStore(b, cg_identity(&g->e, comb, t, 1), c.sacc[q]);
        LLVMBuildStore(b, ki64(g, INT64_MAX), c.saccp[q]);
    }
    int32_t roots[KIR_MAX_STAGES + KIR_MAX_OUTPUTS];
    bool *need = reach(g->e.k, roots, stage_roots(g->e.k, st, n, stores, roots), e);
    c.need = need;
    bool ok = need && positions(e, r, first, ki64(g, W), end, pre_loads, accumulate, &c);
    free(need);
    for (int q = 0; q < n; q++) {
        v[q] = LLVMBuildLoad2(b, cg_ty_of(&g->e, stage_type(g->e.k, st + q)), c.sacc[q], "");
        p[q] = LLVMBuildLoad2(b, g->e.t_i64, c.saccp[q], "");
    }
    return ok;
}

/* The result of stage `st` over row positions [start, end) (at most one leaf) of row r, by the
 * whole warp: lane l combines positions start + l, start + l + 32, ... (lane_acc, `group` sites
 * at a time, with the element stores when `stores`), then the lane tree. Every lane gets the
 * result. */
static bool leaf_result(ent *e, rowc *r, int st, LLVMValueRef start, LLVMValueRef end, bool stores, int group,
                        LLVMValueRef *v, LLVMValueRef *p)
{
    const kir_kernel *k = e->g->e.k;
    int comb = k->stages[st].combiner;
    bool ok = lane_acc(e, r, st, 1, LLVMBuildAdd(e->g->e.b, start, e->lane, ""), end, group, stores, v, p);
    warp_tree(e, comb, stage_type(k, st), v, p);
    return ok;
}

/* A stage's result as KIR_REDUCED gives it: ARG stages their position (INT64_MAX, an empty
 * row, is 0). */
static LLVMValueRef stage_value(gen *g, int st, LLVMValueRef v, LLVMValueRef p)
{
    if (!is_arg_comb(g->e.k->stages[st].combiner))
        return v;
    LLVMValueRef none = LLVMBuildICmp(g->e.b, LLVMIntEQ, p, ki64(g, INT64_MAX), "");
    return LLVMBuildSelect(g->e.b, none, ki64(g, 0), p, "");
}

static bool store_body(site *s, group_ctx *c)
{
    (void)c;
    emit_stores(s, ST_ELEM);
    return true;
}

/* The element stores of row r at positions first, first + step, ... < end. */
static bool elem_stores_to(ent *e, rowc *r, LLVMValueRef first, LLVMValueRef step, LLVMValueRef end)
{
    const kir_kernel *k = e->g->e.k;
    int32_t roots[KIR_MAX_OUTPUTS];
    int n = 0;
    for (int i = 0; i < k->n_stores; i++)
        if (!k->stores[i].row)
            roots[n++] = k->stores[i].value;
    bool *need = reach(k, roots, n, e);
    group_ctx c = {.group = group_size(k, false), .need = need};
    bool ok = need && positions(e, r, first, step, end, pre_loads, store_body, &c);
    free(need);
    return ok;
}

/* The element stores of row r at positions first, first + step, ... < the row's length. */
static bool elem_stores(ent *e, rowc *r, LLVMValueRef first, LLVMValueRef step)
{
    return elem_stores_to(e, r, first, step, e->row_len);
}

static bool no_pre(site *s, group_ctx *c)
{
    (void)s, (void)c;
    return true;
}

/* Positions 4j .. 4j + 3 of the row (s->j is j): their loads, then their values, one 16-byte
 * store per output (cg_ptx_row_vec_out, under the planner's CG_PTX_FLAG_ROW_VEC_OUT). */
static bool quad_body(site *s, group_ctx *c)
{
    ent *e = s->e;
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *k = g->e.k;
    LLVMValueRef j0 = LLVMBuildShl(b, s->j, ki64(g, 2), ""), vout[KIR_MAX_OUTPUTS] = {0};
    site q[4];
    bool ok = true;
    for (int u = 0; u < 4; u++)
        ok = site_begin(e, s->r, LLVMBuildAdd(b, j0, ki64(g, u), ""), &q[u]) && ok;
    for (int u = 0; ok && u < 4; u++)
        pre_loads(&q[u], c);
    for (int u = 0; ok && u < 4; u++)
        for (int i = 0; i < k->n_stores; i++) {
            const kir_store *st = &k->stores[i];
            if (st->row)
                continue;
            burnc_dtype_t dt = k->outputs[st->slot].dtype;
            if (!vout[st->slot])
                vout[st->slot] = LLVMGetPoison(vty(cg_mem_ty(&g->e, dt), 4));
            LLVMValueRef v = cg_to_mem(&g->e, ev(&q[u], st->value), k->insts[st->value].type, dt, 1);
            vout[st->slot] = LLVMBuildInsertElement(b, vout[st->slot], v, ki32(g, u), "");
        }
    for (int i = 0; ok && i < k->n_stores; i++) {
        int o = k->stores[i].slot;
        if (k->stores[i].row || !vout[o])
            continue;
        LLVMValueRef off = LLVMBuildAdd(b, s->r->out_off[o], j0, "");
        store_mem(g, e->out_base[o], off, cg_mem_ty(&g->e, k->outputs[o].dtype), vout[o], 16);
        vout[o] = NULL; /* one store per slot, of the last values */
    }
    for (int u = 0; u < 4; u++)
        free(q[u].val);
    return ok;
}

/* The shared-memory row entry's element stores: 4 positions a thread when the rows allow
 * 16-byte stores, else position by position. */
static bool elem_stores_smem(ent *e, rowc *r)
{
    gen *g = e->g;
    const kir_kernel *k = g->e.k;
    LLVMBuilderRef b = g->e.b;
    if (!cg_ptx_row_vec_out(k))
        return elem_stores(e, r, e->tid, sreg(g, "ntid.x"));
    int32_t roots[KIR_MAX_OUTPUTS];
    int n = 0;
    for (int i = 0; i < k->n_stores; i++)
        if (!k->stores[i].row)
            roots[n++] = k->stores[i].value;
    bool *need = reach(k, roots, n, e);
    if (!need)
        return false;
    LLVMValueRef vec = LLVMBuildICmp(
        b, LLVMIntNE, LLVMBuildAnd(b, launch_word(e, CG_PTX_L_FLAGS), ki64(g, CG_PTX_FLAG_ROW_VEC_OUT), ""), ki64(g, 0),
        "");
    LLVMBasicBlockRef vb = block(e, "stores_vec"), sb = block(e, "stores_elem"), joined = block(e, "stored");
    LLVMBuildCondBr(b, vec, vb, sb);
    LLVMPositionBuilderAtEnd(b, vb);
    group_ctx c = {.group = 1, .need = need};
    bool ok = positions(e, r, e->tid, sreg(g, "ntid.x"), LLVMBuildLShr(b, e->row_len, ki64(g, 2), ""), no_pre,
                        quad_body, &c);
    free(need);
    LLVMBuildBr(b, joined);
    LLVMPositionBuilderAtEnd(b, sb);
    ok = elem_stores(e, r, e->tid, sreg(g, "ntid.x")) && ok;
    LLVMBuildBr(b, joined);
    LLVMPositionBuilderAtEnd(b, joined);
    return ok;
}

/* The row stores of row r, under `cond` (one thread of the row does them). */
static bool row_stores(ent *e, rowc *r, LLVMValueRef cond)
{
    gen *g = e->g;
    LLVMBasicBlockRef yes = block(e, "row_stores"), no = block(e, "row_done");
    LLVMBuildCondBr(g->e.b, cond, yes, no);
    LLVMPositionBuilderAtEnd(g->e.b, yes);
    site s;
    bool ok = site_begin(e, r, NULL, &s);
    if (ok)
        emit_stores(&s, ST_ROW);
    free(s.val);
    LLVMBuildBr(g->e.b, no);
    LLVMPositionBuilderAtEnd(g->e.b, no);
    return ok;
}


/* Element stores that may run before the stages ("early"): none of their values uses a stage's
 * result, and no output overwrites an input (a stage would read what they wrote). An entry
 * whose threads then evaluate the stages at the very positions they stored (the warp-per-row
 * entry; the column and leaves entries store in the last stage's pass instead) reads back,
 * instead of evaluating again, each stored value that costs
 * EARLY_COST or more instructions and sits in an output of its own type that moves along every
 * axis (one element per position): a GELU's backward, stored for the next layer and summed over
 * the batch for the bias, is evaluated once instead of once per phase. Sets g->readback (NULL
 * when nothing qualifies); false when out of memory. */
enum { EARLY_COST = 16 };

static bool same_bits(kir_type t, burnc_dtype_t dt)
{
    return (t == KIR_F32 && dt == BURNC_DTYPE_F32) || (t == KIR_F64 && dt == BURNC_DTYPE_F64) ||
           (t == KIR_I32 && dt == BURNC_DTYPE_I32) || (t == KIR_I64 && dt == BURNC_DTYPE_I64);
}

static bool early_stores(gen *g)
{
    const kir_kernel *k = g->e.k;
    if (!cg_ptx_has_elem_stores(k) || k->n_stages == 0)
        return true;
    for (int o = 0; o < k->n_outputs; o++)
        if (k->in_place[o])
            return true;
    size_t n = (size_t)k->n_insts;
    bool *uses = calloc(n, sizeof *uses);
    int *rb = malloc(n * sizeof *rb);
    bool any = false, ok = uses && rb, independent = ok && cg_ptx_elem_stores_independent(k, uses);
    for (size_t i = 0; ok && i < n; i++)
        rb[i] = -1;
    for (int i = 0; independent && ok && i < k->n_stores; i++) {
        const kir_store *st = &k->stores[i];
        bool moves = true;
        for (int d = 0; d < k->rank; d++)
            moves &= k->outputs[st->slot].stride[d] != KIR_STRIDE_ZERO;
        if (st->row || rb[st->value] >= 0 || !moves || !same_bits(k->insts[st->value].type, k->outputs[st->slot].dtype))
            continue;
        bool *mark = reach(k, &st->value, 1, NULL); /* the value and what it is computed from */
        int cost = mark ? compute_cost(k, mark) : 0;
        ok = mark != NULL;
        free(mark);
        if (cost >= EARLY_COST) {
            rb[st->value] = st->slot;
            any = true;
        }
    }
    free(uses);
    if (any && ok)
        g->readback = rb;
    else
        free(rb);
    return ok;
}

/* A lane's group for stage st (`stores`: with the element stores) in the warp-per-row and column
 * entries: a cheap stage (a plain sum, a sum of squares: fewer than EARLY_COST instructions)
 * waits on memory's latency group after group, so it keeps WIDE_GROUP loads in flight. The
 * deep MLP's LayerNorm forward and backward (rows of 1024 on the H200) went 51.4 -> 48.3 and
 * 44.6 -> 41.5 us (48.7 and 42.5 with 16). */
static int wide_group(const kir_kernel *k, int st, int n, bool stores)
{
    int group = GROUP;
    for (int q = 0; q < n; q++)
        group = stage_group(k, st + q) < group ? stage_group(k, st + q) : group;
    int32_t roots[KIR_MAX_STAGES + KIR_MAX_OUTPUTS];
    bool *mark = group == GROUP ? reach(k, roots, stage_roots(k, st, n, stores, roots), NULL) : NULL;
    if (mark && compute_cost(k, mark) < EARLY_COST)
        group = WIDE_GROUP;
    free(mark);
    return group;
}

/* Rows of at most one leaf: warp w of block c takes row c * rows_per_block + w. */
static bool emit_rows_warp(gen *g)
{
    ent e;
    ent_begin(g, &e, CG_PTX_ENTRY_ROWS_WARP);
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef warp = LLVMBuildLShr(b, e.tid, ki64(g, 5), "");
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildMul(b, sreg(g, "ctaid.x"), ki64(g, g->rows_per_block), ""), warp, "");
    LLVMBasicBlockRef work = block(&e, "work"), done = block(&e, "done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, row, launch_word(&e, CG_PTX_L_COUNT), ""), work, done);
    LLVMPositionBuilderAtEnd(b, work);
    rowc r;
    row_begin(&e, &r, row);
    bool ok = true;
    if (g->readback) { /* a lane stores the positions its stages read (early_stores) */
        ok = elem_stores(&e, &r, e.lane, ki64(g, W));
        e.stored = true;
    }
    for (int st = 0; st < g->e.k->n_stages && ok; st++) {
        LLVMValueRef v, p;
        ok = leaf_result(&e, &r, st, ki64(g, 0), e.row_len, false, wide_group(g->e.k, st, 1, false), &v, &p);
        r.reduced[st] = stage_value(g, st, v, p);
    }
    if (ok && cg_ptx_has_elem_stores(g->e.k) && !g->readback)
        ok = elem_stores(&e, &r, e.lane, ki64(g, W));
    if (ok)
        ok = row_stores(&e, &r, LLVMBuildICmp(b, LLVMIntEQ, e.lane, ki64(g, 0), ""));
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    ent_end(&e);
    return ok;
}

/* ---- Records: (value, position) pairs in shared memory or scratch ------------------------ */

static LLVMValueRef rec_at(gen *g, LLVMValueRef base, LLVMValueRef i, int half)
{
    LLVMValueRef ix = LLVMBuildAdd(g->e.b, LLVMBuildMul(g->e.b, i, ki64(g, 2), ""), ki64(g, half), "");
    return LLVMBuildGEP2(g->e.b, g->e.t_i64, base, &ix, 1, "");
}

static void rec_store(gen *g, LLVMValueRef base, LLVMValueRef i, LLVMValueRef v, LLVMValueRef p)
{
    LLVMSetAlignment(LLVMBuildStore(g->e.b, v, rec_at(g, base, i, 0)), 8);
    LLVMSetAlignment(LLVMBuildStore(g->e.b, p, rec_at(g, base, i, 1)), 8);
}

static void rec_load(gen *g, LLVMValueRef base, LLVMValueRef i, int t, LLVMValueRef *v, LLVMValueRef *p)
{
    *v = LLVMBuildLoad2(g->e.b, cg_ty_of(&g->e, t), rec_at(g, base, i, 0), "");
    LLVMSetAlignment(*v, 8);
    *p = LLVMBuildLoad2(g->e.b, g->e.t_i64, rec_at(g, base, i, 1), "");
    LLVMSetAlignment(*p, 8);
}

static void barrier(gen *g) { cg_call_intrinsic(&g->e, "llvm.nvvm.barrier0", NULL, 0, NULL, 0); }

/* Leaf `leaf` of row r for stage st (the identity past the last leaf: the warp-uniform
 * branch keeps the shuffles converged). */
static bool leaf_or_identity(ent *e, rowc *r, int st, LLVMValueRef leaf, LLVMValueRef n_leaves, LLVMValueRef *v,
                             LLVMValueRef *p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    int comb = g->e.k->stages[st].combiner, t = stage_type(g->e.k, st);
    LLVMValueRef av = entry_alloca(e, cg_ty_of(&g->e, t)), ap = entry_alloca(e, g->e.t_i64);
    LLVMBuildStore(b, cg_identity(&g->e, comb, t, 1), av);
    LLVMBuildStore(b, ki64(g, INT64_MAX), ap);
    LLVMBasicBlockRef cont = cg_if_begin(&e->g->e, LLVMBuildICmp(b, LLVMIntULT, leaf, n_leaves, ""), "leaf");
    LLVMValueRef start = LLVMBuildShl(b, leaf, ki64(g, LEAF_SHIFT), "");
    LLVMValueRef end = umin64(g, e->row_len, LLVMBuildAdd(b, start, ki64(g, KIR_LEAF), ""));
    LLVMValueRef lv, lp;
    bool ok = leaf_result(e, r, st, start, end, false, stage_group(g->e.k, st), &lv, &lp);
    LLVMBuildStore(b, lv, av);
    LLVMBuildStore(b, lp, ap);
    cg_if_end(&e->g->e, cont);
    *v = LLVMBuildLoad2(b, cg_ty_of(&g->e, t), av, "");
    *p = LLVMBuildLoad2(b, g->e.t_i64, ap, "");
    return ok;
}

/* Pushes chunk c's result onto the binary-counter stack: while bit l of c is set, the pending
 * left subtree at level l takes it as its right half. Together with stack_fold this is
 * kernel.h's pairwise tree over the chunks. (Thread 0 only.) */
static void stack_push(ent *e, int st, LLVMValueRef stack, LLVMValueRef c, LLVMValueRef v, LLVMValueRef p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    int comb = g->e.k->stages[st].combiner, t = stage_type(g->e.k, st);
    LLVMValueRef av = entry_alloca(e, cg_ty_of(&g->e, t)), ap = entry_alloca(e, g->e.t_i64),
                 al = entry_alloca(e, g->e.t_i64);
    LLVMBuildStore(b, v, av);
    LLVMBuildStore(b, p, ap);
    LLVMBuildStore(b, ki64(g, 0), al);
    LLVMBasicBlockRef head = block(e, "push"), body = block(e, "push_body"), out = block(e, "push_out");
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef l = LLVMBuildLoad2(b, g->e.t_i64, al, "");
    LLVMValueRef bit = LLVMBuildAnd(b, LLVMBuildLShr(b, c, l, ""), ki64(g, 1), "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntNE, bit, ki64(g, 0), ""), body, out);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef sv, sp, nv, np = NULL;
    rec_load(g, stack, l, t, &sv, &sp);
    cg_combine(&g->e, comb, t, sv, sp, LLVMBuildLoad2(b, cg_ty_of(&g->e, t), av, ""),
               LLVMBuildLoad2(b, g->e.t_i64, ap, ""), &nv, &np);
    LLVMBuildStore(b, nv, av);
    if (np)
        LLVMBuildStore(b, np, ap);
    LLVMBuildStore(b, LLVMBuildAdd(b, l, ki64(g, 1), ""), al);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, out);
    rec_store(g, stack, l, LLVMBuildLoad2(b, cg_ty_of(&g->e, t), av, ""), LLVMBuildLoad2(b, g->e.t_i64, ap, ""));
}

/* The row's result from the stack after n_chunks pushes: the pending subtrees from the
 * smallest up, each taking what is right of it as its right half (an odd subtree is carried
 * up unchanged, as kernel.h says). The identity for no chunks. (Thread 0 only.) */
static void stack_fold(ent *e, int st, LLVMValueRef stack, LLVMValueRef n_chunks, LLVMValueRef *v, LLVMValueRef *p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    int comb = g->e.k->stages[st].combiner, t = stage_type(g->e.k, st);
    LLVMValueRef av = entry_alloca(e, cg_ty_of(&g->e, t)), ap = entry_alloca(e, g->e.t_i64),
                 have = entry_alloca(e, g->e.t_i1);
    LLVMBuildStore(b, cg_identity(&g->e, comb, t, 1), av);
    LLVMBuildStore(b, ki64(g, INT64_MAX), ap);
    LLVMBuildStore(b, LLVMConstInt(g->e.t_i1, 0, 0), have);
    /* levels above n_chunks' highest set bit hold nothing: stop there (one level for rows of
     * up to 32 leaves) instead of walking all STACK_DEPTH, a shared-memory round trip each */
    LLVMValueRef zero_undef = LLVMConstInt(g->e.t_i1, 0, 0), cargs[2] = {n_chunks, zero_undef};
    LLVMTypeRef i64t = g->e.t_i64;
    LLVMValueRef levels = LLVMBuildSub(b, ki64(g, 64), cg_call_intrinsic(&g->e, "llvm.ctlz", &i64t, 1, cargs, 2), "");
    loop l;
    loop_begin(e, &l, ki64(g, 0), ki64(g, 1), levels);
    LLVMValueRef bit = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, LLVMBuildLShr(b, n_chunks, l.i, ""), ki64(g, 1), ""),
                                     ki64(g, 0), "");
    LLVMValueRef sv, sp, cv, cp = NULL;
    rec_load(g, stack, l.i, t, &sv, &sp);
    LLVMValueRef acc = LLVMBuildLoad2(b, cg_ty_of(&g->e, t), av, ""), accp = LLVMBuildLoad2(b, g->e.t_i64, ap, "");
    LLVMValueRef h = LLVMBuildLoad2(b, g->e.t_i1, have, "");
    cg_combine(&g->e, comb, t, sv, sp, acc, accp, &cv, &cp);
    LLVMValueRef nv = LLVMBuildSelect(b, h, cv, sv, ""), np = cp ? LLVMBuildSelect(b, h, cp, sp, "") : sp;
    LLVMBuildStore(b, LLVMBuildSelect(b, bit, nv, acc, ""), av);
    LLVMBuildStore(b, LLVMBuildSelect(b, bit, np, accp, ""), ap);
    LLVMBuildStore(b, LLVMBuildOr(b, h, bit, ""), have);
    loop_end(e, &l);
    *v = LLVMBuildLoad2(b, cg_ty_of(&g->e, t), av, "");
    *p = LLVMBuildLoad2(b, g->e.t_i64, ap, "");
}

static bool copy_load(site *s, group_ctx *c)
{
    ent *e = s->e;
    gen *g = e->g;
    burnc_dtype_t dt = g->e.k->inputs[c->slot].dtype;
    s->raw = load_mem(g, e->in_base[c->slot], s->in_off[c->slot], cg_mem_ty(&g->e, dt), cg_mem_ty(&g->e, dt),
                      cg_mem_align(dt), !g->writable_input[c->slot]);
    return true;
}

/* Stage 0's combine as the copy does it (fast_slot): the f32 max or min that propagates NaN,
 * in any order. */
static LLVMValueRef fast_fold(gen *g, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef t = g->e.t_f32;
    LLVMValueRef args[2] = {a, b};
    bool max = g->e.k->stages[0].combiner == KIR_COMBINE_MAX;
    return cg_call_intrinsic(&g->e, max ? "llvm.maximum" : "llvm.minimum", &t, 1, args, 2);
}

static void fast_acc(gen *g, group_ctx *c, LLVMValueRef x)
{
    LLVMBuildStore(g->e.b, fast_fold(g, LLVMBuildLoad2(g->e.b, g->e.t_f32, c->acc, ""), x), c->acc);
}

static bool copy_store(site *s, group_ctx *c)
{
    gen *g = s->e->g;
    burnc_dtype_t dt = g->e.k->inputs[c->slot].dtype;
    LLVMValueRef p = LLVMBuildGEP2(g->e.b, cg_mem_ty(&g->e, dt), s->e->smem_base[c->slot], &s->j, 1, "");
    LLVMSetAlignment(LLVMBuildStore(g->e.b, s->raw, p), cg_mem_align(dt));
    if (c->acc)
        fast_acc(g, c, s->raw);
    return true;
}

/* The vector copy: 16-byte piece j of the row, as <4 x i32> whatever the dtype (the planner's
 * CG_PTX_FLAG_ROW_VEC: the row is contiguous and its start and length are multiples of 16
 * bytes). */
static bool vcopy_load(site *s, group_ctx *c)
{
    ent *e = s->e;
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef size = ki64(g, cg_mem_align(g->e.k->inputs[c->slot].dtype));
    LLVMValueRef byte = LLVMBuildAdd(b, LLVMBuildMul(b, s->r->in_off[c->slot], size, ""),
                                     LLVMBuildShl(b, s->j, ki64(g, 4), ""), "");
    LLVMValueRef addr = LLVMBuildAdd(b, e->in_base[c->slot], byte, "");
    LLVMTypeRef v4 = vty(g->e.t_i32, 4);
    if (g->writable_input[c->slot]) {
        s->raw = LLVMBuildLoad2(b, v4, gptr(g, addr), "");
        LLVMSetAlignment(s->raw, 16);
    } else {
        LLVMTypeRef tys[2] = {v4, g->t_gptr};
        LLVMValueRef args[2] = {gptr(g, addr), ki32(g, 16)};
        s->raw = cg_call_intrinsic(&g->e, "llvm.nvvm.ldg.global.i", tys, 2, args, 2);
    }
    return true;
}

static bool vcopy_store(site *s, group_ctx *c)
{
    gen *g = s->e->g;
    LLVMValueRef off = LLVMBuildShl(g->e.b, s->j, ki64(g, 4), "");
    LLVMValueRef p = LLVMBuildGEP2(g->e.b, g->e.t_i8, s->e->smem_base[c->slot], &off, 1, "");
    LLVMSetAlignment(LLVMBuildStore(g->e.b, s->raw, p), 16);
    LLVMValueRef f = c->acc ? LLVMBuildBitCast(g->e.b, s->raw, vty(g->e.t_f32, 4), "") : NULL;
    for (int u = 0; c->acc && u < 4; u++)
        fast_acc(g, c, LLVMBuildExtractElement(g->e.b, f, ki32(g, u), ""));
    return true;
}

/* The shared-memory row entry's first step: the whole block copies row r of every cached input
 * into its region of dynamic shared memory (regions as cg_ptx_row_smem_bytes lays them out,
 * the kept stages' after the inputs' unless they take over an input's); from then on the
 * row's loads of those inputs read shared memory. Rows the planner flags go as 16-byte
 * vectors, a group of them in flight per thread; others element by element. */
static bool copy_row(ent *e, rowc *r)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *k = g->e.k;
    LLVMValueRef at = ki64(g, 0), ntid = sreg(g, "ntid.x");
    bool ok = true;
    LLVMValueRef vec = LLVMBuildICmp(
        b, LLVMIntNE, LLVMBuildAnd(b, launch_word(e, CG_PTX_L_FLAGS), ki64(g, CG_PTX_FLAG_ROW_VEC), ""), ki64(g, 0), "");
    LLVMValueRef fast = g->fast_slot >= 0 ? entry_alloca(e, g->e.t_f32) : NULL;
    if (fast)
        LLVMBuildStore(b, cg_identity(&g->e, k->stages[0].combiner, KIR_F32, 1), fast);
    for (int s = 0; s < k->n_inputs && ok; s++) {
        if (!g->cached[s])
            continue;
        burnc_dtype_t dt = k->inputs[s].dtype;
        e->smem_base[s] = LLVMBuildGEP2(b, g->e.t_i8, g->sh_dyn, &at, 1, "");
        LLVMValueRef bytes = LLVMBuildMul(b, e->row_len, ki64(g, cg_mem_align(dt)), "");
        at = LLVMBuildAdd(b, at, LLVMBuildAnd(b, LLVMBuildAdd(b, bytes, ki64(g, 15), ""), ki64(g, ~(int64_t)15), ""), "");
        group_ctx c = {.group = GROUP, .slot = s, .acc = s == g->fast_slot ? fast : NULL};
        LLVMBasicBlockRef vb = block(e, "copy_vec"), sb = block(e, "copy_elem"), joined = block(e, "copied");
        LLVMBuildCondBr(b, vec, vb, sb);
        LLVMPositionBuilderAtEnd(b, vb);
        ok = positions(e, r, e->tid, ntid, LLVMBuildLShr(b, bytes, ki64(g, 4), ""), vcopy_load, vcopy_store, &c);
        LLVMBuildBr(b, joined);
        LLVMPositionBuilderAtEnd(b, sb);
        c.group = group_size(k, false);
        ok = ok && positions(e, r, e->tid, ntid, e->row_len, copy_load, copy_store, &c);
        LLVMBuildBr(b, joined);
        LLVMPositionBuilderAtEnd(b, joined);
    }
    for (int st = 0; st < k->n_stages; st++) {
        if (!g->kept[st])
            continue;
        if (g->alias[st] >= 0) {
            e->kept_base[st] = e->smem_base[g->alias[st]];
            continue;
        }
        e->kept_base[st] = LLVMBuildGEP2(b, g->e.t_i8, g->sh_dyn, &at, 1, "");
        int size = cg_ptx_kept_size(k->insts[k->stages[st].value].type);
        LLVMValueRef bytes = LLVMBuildMul(b, e->row_len, ki64(g, size), "");
        at = LLVMBuildAdd(b, at, LLVMBuildAnd(b, LLVMBuildAdd(b, bytes, ki64(g, 15), ""), ki64(g, ~(int64_t)15), ""), "");
    }
    LLVMValueRef warp = LLVMBuildLShr(b, e->tid, ki64(g, 5), "");
    if (fast) { /* the threads' partial results over the warp, lane 0 leaves the warp's */
        LLVMValueRef v = LLVMBuildLoad2(b, g->e.t_f32, fast, "");
        for (int m = 1; m < W; m *= 2)
            v = fast_fold(g, v, shfl_xor(g, v, m));
        LLVMBasicBlockRef cont = cg_if_begin(&e->g->e, LLVMBuildICmp(b, LLVMIntEQ, e->lane, ki64(g, 0), ""), "part");
        LLVMBuildStore(b, v, LLVMBuildGEP2(b, g->e.t_f32, g->sh_part, &warp, 1, ""));
        cg_if_end(&e->g->e, cont);
    }
    barrier(g);
    if (fast) { /* every thread folds the warps' results alike, so the block agrees on the bits */
        LLVMBuildStore(b, cg_identity(&g->e, k->stages[0].combiner, KIR_F32, 1), fast);
        loop l;
        loop_begin(e, &l, ki64(g, 0), ki64(g, 1), LLVMBuildLShr(b, sreg(g, "ntid.x"), ki64(g, 5), ""));
        LLVMValueRef part = LLVMBuildLoad2(b, g->e.t_f32, LLVMBuildGEP2(b, g->e.t_f32, g->sh_part, &l.i, 1, ""), "");
        LLVMBuildStore(b, fast_fold(g, LLVMBuildLoad2(b, g->e.t_f32, fast, ""), part), fast);
        loop_end(e, &l);
        e->fast_val = LLVMBuildLoad2(b, g->e.t_f32, fast, "");
    }
    e->smem = true;
    return ok;
}

static bool keep_body(site *s, group_ctx *c)
{
    gen *g = s->e->g;
    int t = stage_type(g->e.k, c->st);
    LLVMValueRef x = ev(s, g->e.k->stages[c->st].value);
    LLVMValueRef p = LLVMBuildGEP2(g->e.b, cg_ty_of(&g->e, t), s->e->kept_base[c->st], &s->j, 1, "");
    LLVMSetAlignment(LLVMBuildStore(g->e.b, x, p), (unsigned)cg_ptx_kept_size(t));
    return true;
}

/* Positions 4j .. 4j + 3 of the row (s->j is j): their loads, then their values. Shared-memory
 * regions start on 16 bytes, so the four loads of a cached input and the four stores of a
 * 32-bit kept value become one 16-byte access each, with one address. */
static bool keep_quad(site *s, group_ctx *c)
{
    ent *e = s->e;
    gen *g = e->g;
    LLVMValueRef j0 = LLVMBuildShl(g->e.b, s->j, ki64(g, 2), "");
    site q[4];
    bool ok = true;
    for (int u = 0; u < 4; u++)
        ok = site_begin(e, s->r, LLVMBuildAdd(g->e.b, j0, ki64(g, u), ""), &q[u]) && ok;
    for (int u = 0; ok && u < 4; u++)
        pre_loads(&q[u], c);
    for (int u = 0; ok && u < 4; u++)
        keep_body(&q[u], c);
    for (int u = 0; u < 4; u++)
        free(q[u].val);
    return ok;
}

/* A kept stage's values, before its combine: every thread of the block evaluates them at its
 * positions into shared memory (softmax's exp over the whole block, not over the row's few
 * leaf warps); the combine and later phases then read them. Rows of one reduced axis go 4
 * positions at a time (keep_quad), the last row_len % 4 one by one. */
static bool keep_stage(ent *e, rowc *r, int st)
{
    gen *g = e->g;
    const kir_kernel *k = g->e.k;
    LLVMBuilderRef b = g->e.b;
    bool *need = reach(k, &k->stages[st].value, 1, e);
    group_ctx c = {.group = group_size(k, false), .need = need, .st = st};
    LLVMValueRef first = e->tid, ntid = sreg(g, "ntid.x");
    bool ok = need != NULL;
    if (ok && k->rank - k->n_outer == 1 && cg_ptx_kept_size(stage_type(k, st)) == 4) {
        group_ctx q = c;
        q.group = 2;
        ok = positions(e, r, e->tid, ntid, LLVMBuildLShr(b, e->row_len, ki64(g, 2), ""), no_pre, keep_quad, &q);
        first = LLVMBuildAdd(b, LLVMBuildAnd(b, e->row_len, ki64(g, ~(int64_t)3), ""), e->tid, "");
    }
    ok = ok && positions(e, r, first, ntid, e->row_len, pre_loads, keep_body, &c);
    free(need);
    barrier(g);
    e->kept_ready[st] = true;
    return ok;
}

/* Stage st of row r over the whole block: rounds of 32 leaves (warps take whole leaves, lane 0
 * writes the leaf record to shared memory), warp 0 reduces the round with the lane tree,
 * thread 0 stacks the round's result; the stage result goes through shared memory to every
 * thread. */
static bool stage_by_leaves(ent *e, rowc *r, int st, LLVMValueRef *v, LLVMValueRef *p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    int t = stage_type(g->e.k, st), comb = g->e.k->stages[st].combiner;
    LLVMValueRef warp = LLVMBuildLShr(b, e->tid, ki64(g, 5), ""),
                 n_warps = LLVMBuildLShr(b, sreg(g, "ntid.x"), ki64(g, 5), "");
    LLVMValueRef n_leaves =
        LLVMBuildLShr(b, LLVMBuildAdd(b, e->row_len, ki64(g, KIR_LEAF - 1), ""), ki64(g, LEAF_SHIFT), "");
    LLVMValueRef n_chunks = LLVMBuildLShr(b, LLVMBuildAdd(b, n_leaves, ki64(g, W - 1), ""), ki64(g, 5), "");
    LLVMValueRef lane0 = LLVMBuildICmp(b, LLVMIntEQ, e->lane, ki64(g, 0), "");
    LLVMValueRef thread0 = LLVMBuildICmp(b, LLVMIntEQ, e->tid, ki64(g, 0), "");
    loop c;
    loop_begin(e, &c, ki64(g, 0), ki64(g, 1), n_chunks);
    loop li;
    loop_begin(e, &li, warp, n_warps, ki64(g, W));
    LLVMValueRef leaf = LLVMBuildAdd(b, LLVMBuildShl(b, c.i, ki64(g, 5), ""), li.i, "");
    bool ok = leaf_or_identity(e, r, st, leaf, n_leaves, v, p);
    LLVMBasicBlockRef cont = cg_if_begin(&e->g->e, lane0, "leaf_rec");
    rec_store(g, g->sh_leaf, li.i, *v, *p);
    cg_if_end(&e->g->e, cont);
    loop_end(e, &li);
    barrier(g);
    cont = cg_if_begin(&e->g->e, LLVMBuildICmp(b, LLVMIntEQ, warp, ki64(g, 0), ""), "round");
    rec_load(g, g->sh_leaf, e->lane, t, v, p);
    warp_tree(e, comb, t, v, p);
    LLVMBasicBlockRef cont2 = cg_if_begin(&e->g->e, lane0, "push");
    stack_push(e, st, g->sh_stack, c.i, *v, *p);
    cg_if_end(&e->g->e, cont2);
    cg_if_end(&e->g->e, cont);
    barrier(g);
    loop_end(e, &c);
    cont = cg_if_begin(&e->g->e, thread0, "fold");
    stack_fold(e, st, g->sh_stack, n_chunks, v, p);
    rec_store(g, g->sh_res, ki64(g, 0), *v, *p);
    cg_if_end(&e->g->e, cont);
    barrier(g);
    rec_load(g, g->sh_res, ki64(g, 0), t, v, p);
    barrier(g); /* everyone has read sh_res before a later stage rewrites it */
    return ok;
}

/* Stage 0 when the copy took it (fast_slot): the max (min) of an f32 row is one of its
 * elements, and kernel.h's order only decides which of the elements equal to it wins. Those
 * have the same bits unless they are zeros (+0 and -0 compare equal) or NaNs (each its own
 * payload): the result the copy found, in any order, is the exact one unless it is a zero or
 * a NaN; then (a branch the whole block takes alike) the stage runs again in kernel.h's order.
 * Saves the row's two leaf warps a 128-step chain of compare-selects and the block four
 * barriers. */
static bool fast_stage(ent *e, rowc *r, LLVMValueRef *v, LLVMValueRef *p)
{
    gen *g = e->g;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef res = entry_alloca(e, g->e.t_f32), fv = e->fast_val;
    LLVMBuildStore(b, fv, res);
    LLVMValueRef special = LLVMBuildOr(b, LLVMBuildFCmp(b, LLVMRealUNO, fv, fv, ""),
                                       LLVMBuildFCmp(b, LLVMRealOEQ, fv, LLVMConstReal(g->e.t_f32, 0.0), ""), "");
    LLVMBasicBlockRef cont = cg_if_begin(&e->g->e, special, "exact_stage");
    LLVMValueRef ev_, ep;
    bool ok = stage_by_leaves(e, r, 0, &ev_, &ep);
    LLVMBuildStore(b, ev_, res);
    cg_if_end(&e->g->e, cont);
    *v = LLVMBuildLoad2(b, g->e.t_f32, res, "");
    *p = ki64(g, INT64_MAX);
    return ok;
}

/* Longer rows: block c takes row c, stage by stage (stage_by_leaves). With smem (the
 * shared-memory row entry), the cached inputs are copied on chip first. */
static bool emit_rows_block(gen *g, bool smem)
{
    ent e;
    ent_begin(g, &e, smem ? CG_PTX_ENTRY_ROWS_SMEM : CG_PTX_ENTRY_ROWS_BLOCK);
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef row = sreg(g, "ctaid.x");
    LLVMBasicBlockRef work = block(&e, "work"), done = block(&e, "done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, row, launch_word(&e, CG_PTX_L_COUNT), ""), work, done);
    LLVMPositionBuilderAtEnd(b, work);
    LLVMValueRef thread0 = LLVMBuildICmp(b, LLVMIntEQ, e.tid, ki64(g, 0), "");
    rowc r;
    row_begin(&e, &r, row);
    bool ok = !smem || copy_row(&e, &r);
    for (int st = 0; st < g->e.k->n_stages && ok; st++) {
        if (smem && g->kept[st])
            ok = keep_stage(&e, &r, st);
        LLVMValueRef v, p;
        if (smem && st == 0 && g->fast_slot >= 0)
            ok = fast_stage(&e, &r, &v, &p) && ok;
        else
            ok = stage_by_leaves(&e, &r, st, &v, &p) && ok;
        r.reduced[st] = stage_value(g, st, v, p);
    }
    if (ok && cg_ptx_has_elem_stores(g->e.k))
        ok = smem ? elem_stores_smem(&e, &r) : elem_stores(&e, &r, e.tid, sreg(g, "ntid.x"));
    if (ok)
        ok = row_stores(&e, &r, thread0);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    ent_end(&e);
    return ok;
}

/* log2 of a power of two. */
static int ilog2(int v)
{
    int n = 0;
    while ((1 << (n + 1)) <= v)
        n++;
    return n;
}

/* ---- Rows side by side: the column entry ------------------------------------------------- */

/* Leaves a row of the column entry may have: 2^CSTACK_DEPTH (positions are below 2^64). */
enum { CSTACK_DEPTH = 64 - LEAF_SHIFT };

/* With C = 2^cols_shift rows per block, block c takes rows c C + i (ptx.h): thread t works at
 * lane t >> cols_shift of row t % C. Per pass (cg_ptx_cols_pass: stages whose values use no
 * result of one another, each with its own stack) and leaf, each thread combines its lane's
 * positions (lane_acc, one evaluation a position for the pass's stages), the lanes' records
 * meet in shared memory stage by stage, warp w (there are C) does row w's lane tree and stacks
 * the leaf; after the last leaf it folds each stack (stage_by_leaves' order), and every thread
 * reads its row's results back. A block of P > 1 such groups (element stores:
 * cg_ptx_cols_threads) sums P leaves of each row at a time, its warps do their P C lane trees
 * side by side, and row w's warp stacks the P results in leaf order: the same leaves, trees and
 * stack as one group, with P times the loads in flight and a third of the barriers a leaf.
 * Element stores that use no result of the last pass (cg_ptx_cols_pass_stores) go in that pass,
 * each where its lane has just evaluated the position, with P = 1: a GELU's backward stored for the next layer and summed for the
 * bias over 4096 x 1024 took 222 us on the H200 with them spread over 4 times the threads
 * (stored first, read back: 64 registers a thread, spilling), against 49 us for the same
 * kernel without the stores. Other element stores take every thread of the block after the
 * stages (g->cols_threads: position j of row i by thread i + C (j mod 32 s), with s =
 * cols_threads / 32 C). Threads past the last row read nothing and store nothing, but keep to
 * the barriers; their offsets are the last row's. */
static bool emit_cols(gen *g)
{
    ent e;
    ent_begin(g, &e, CG_PTX_ENTRY_COLS);
    e.cols = true;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *k = g->e.k;
    LLVMValueRef col = LLVMBuildAnd(b, e.tid, ki64(g, (1 << g->cols_shift) - 1), ""),
                 lane = LLVMBuildLShr(b, e.tid, ki64(g, g->cols_shift), ""),
                 warp = LLVMBuildLShr(b, e.tid, ki64(g, 5), ""), count = launch_word(&e, CG_PTX_L_COUNT);
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, sreg(g, "ctaid.x"), ki64(g, g->cols_shift), ""), col, "");
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntULT, row, count, "");
    rowc r;
    row_begin(&e, &r, umin64(g, row, LLVMBuildSub(b, count, ki64(g, 1), "")));
    LLVMValueRef n_leaves =
        LLVMBuildLShr(b, LLVMBuildAdd(b, e.row_len, ki64(g, KIR_LEAF - 1), ""), ki64(g, LEAF_SHIFT), "");
    /* P groups of C x 32 threads (all of the block's) take P leaves of every row at a time:
     * thread t sums lane (t >> cols_shift) % 32 of leaf `round P + group` (P is 1 for a
     * kernel without element stores after its stages, whose block is one group) */
    int P = g->cols_threads >> (g->cols_shift + 5);
    LLVMValueRef lane_k = LLVMBuildAnd(b, lane, ki64(g, 31), ""), grp = LLVMBuildLShr(b, lane, ki64(g, 5), "");
    /* the thread's record: lane lane_k of the tree of row col in group grp */
    LLVMValueRef tree = LLVMBuildAdd(b, LLVMBuildShl(b, grp, ki64(g, g->cols_shift), ""), col, "");
    LLVMValueRef mine = LLVMBuildAdd(b, LLVMBuildShl(b, tree, ki64(g, 5), ""), lane_k, ""),
                 theirs = LLVMBuildAdd(b, LLVMBuildShl(b, warp, ki64(g, 5), ""), e.lane, "");
    /* the stack of row w's q-th stage of a pass (cg_ptx_cols_pass_max: at most 2): record
     * (q C + w) 2 CSTACK_DEPTH */
    LLVMValueRef stacks[2];
    for (int q = 0; q < cg_ptx_cols_pass_max(1 << g->cols_shift); q++) {
        LLVMValueRef ix = LLVMBuildMul(b, LLVMBuildAdd(b, warp, ki64(g, (int64_t)q << g->cols_shift), ""),
                                       ki64(g, 2 * CSTACK_DEPTH), "");
        stacks[q] = LLVMBuildGEP2(b, g->e.t_i64, g->sh_cstack, &ix, 1, "");
    }
    LLVMValueRef lane0 = LLVMBuildICmp(b, LLVMIntEQ, e.lane, ki64(g, 0), "");
    LLVMValueRef stores_end = LLVMBuildSelect(b, valid, e.row_len, ki64(g, 0), "");
    /* the stages' warps: a lane of each row (warp-uniform) */
    LLVMValueRef staged = LLVMBuildICmp(b, LLVMIntULT, warp, ki64(g, 1 << g->cols_shift), "");
    LLVMValueRef spread = ki64(g, g->cols_threads >> g->cols_shift); /* 32 s */
    int C = 1 << g->cols_shift;
    bool ok = true, pass_stores = cg_ptx_cols_pass_stores(k, C); /* then P is 1 (cg_ptx_cols_threads) */
    int pshift = ilog2(P), n;
    LLVMValueRef rounds = LLVMBuildLShr(b, LLVMBuildAdd(b, n_leaves, ki64(g, P - 1), ""), ki64(g, pshift), "");
    bool uses[CG_PTX_MULTIPASS_MAX_INSTS];
    for (int st0 = 0; st0 < k->n_stages && ok; st0 += n) {
        n = cg_ptx_cols_pass(k, st0, C, uses);
        LLVMValueRef pv[2], pp[2];
        loop lf;
        loop_begin(&e, &lf, ki64(g, 0), ki64(g, 1), rounds);
        LLVMValueRef first = LLVMBuildShl(b, lf.i, ki64(g, pshift), ""); /* the round's first leaf */
        LLVMValueRef leaf = LLVMBuildAdd(b, first, grp, "");
        LLVMValueRef start = LLVMBuildShl(b, leaf, ki64(g, LEAF_SHIFT), "");
        LLVMValueRef end = umin64(g, e.row_len, LLVMBuildAdd(b, start, ki64(g, KIR_LEAF), ""));
        end = LLVMBuildSelect(b, LLVMBuildAnd(b, valid, LLVMBuildICmp(b, LLVMIntULT, leaf, n_leaves, ""), ""), end,
                              start, "");
        bool stores = pass_stores && st0 + n == k->n_stages;
        ok = lane_acc(&e, &r, st0, n, LLVMBuildAdd(b, start, lane_k, ""), end, wide_group(k, st0, n, stores), stores,
                      pv, pp);
        for (int m = 0; m < n; m++) {
            int st = st0 + m, t = stage_type(k, st);
            LLVMValueRef v = pv[m], p = pp[m], stack = stacks[m];
            rec_store(g, g->sh_cols, mine, v, p);
            barrier(g);
            /* warp w does the lane tree of row w % C's leaf round P + w / C */
            rec_load(g, g->sh_cols, theirs, t, &v, &p);
            warp_tree(&e, k->stages[st].combiner, t, &v, &p);
            LLVMBasicBlockRef c2 = cg_if_begin(&e.g->e, LLVMBuildAnd(b, lane0, staged, ""), "push");
            if (P == 1)
                stack_push(&e, st, stack, lf.i, v, p);
            cg_if_end(&e.g->e, c2);
            if (P > 1) { /* the round's leaves go on each row's stack in order, by the row's warp */
                c2 = cg_if_begin(&e.g->e, lane0, "leaf");
                rec_store(g, g->sh_cres, warp, v, p);
                cg_if_end(&e.g->e, c2);
                barrier(g);
                c2 = cg_if_begin(&e.g->e, LLVMBuildAnd(b, lane0, staged, ""), "push");
                for (int q = 0; q < P; q++) {
                    LLVMValueRef lq = LLVMBuildAdd(b, first, ki64(g, q), "");
                    LLVMBasicBlockRef c3 = cg_if_begin(&e.g->e, LLVMBuildICmp(b, LLVMIntULT, lq, n_leaves, ""), "in");
                    rec_load(g, g->sh_cres, LLVMBuildAdd(b, warp, ki64(g, (int64_t)q << g->cols_shift), ""), t, &v, &p);
                    stack_push(&e, st, stack, lq, v, p);
                    cg_if_end(&e.g->e, c3);
                }
                cg_if_end(&e.g->e, c2);
            }
            barrier(g); /* the records are read before the next round (or stage) writes them */
        }
        loop_end(&e, &lf);
        for (int q = 0; q < n; q++) {
            int st = st0 + q, t = stage_type(k, st);
            LLVMValueRef v, p;
            LLVMBasicBlockRef cont = cg_if_begin(&e.g->e, LLVMBuildAnd(b, lane0, staged, ""), "fold");
            stack_fold(&e, st, stacks[q], n_leaves, &v, &p);
            rec_store(g, g->sh_cres, warp, v, p);
            cg_if_end(&e.g->e, cont);
            barrier(g);
            rec_load(g, g->sh_cres, col, t, &v, &p);
            barrier(g); /* read before a later stage writes it */
            r.reduced[st] = stage_value(g, st, v, p);
        }
    }
    if (ok && cg_ptx_has_elem_stores(k) && !pass_stores)
        ok = elem_stores_to(&e, &r, lane, spread, stores_end);
    if (ok)
        ok = row_stores(&e, &r, LLVMBuildAnd(b, valid, LLVMBuildICmp(b, LLVMIntEQ, lane, ki64(g, 0), ""), ""));
    ent_end(&e);
    return ok;
}

/* ---- Few long rows: leaves, tree passes, finish ------------------------------------------ */

static LLVMValueRef global_warp(ent *e)
{
    gen *g = e->g;
    LLVMValueRef t = LLVMBuildAdd(g->e.b, LLVMBuildMul(g->e.b, sreg(g, "ctaid.x"), sreg(g, "ntid.x"), ""), e->tid, "");
    return LLVMBuildLShr(g->e.b, t, ki64(g, 5), "");
}

static LLVMValueRef scratch(ent *e, int w) { return LLVMBuildIntToPtr(e->g->e.b, launch_word(e, w), e->g->t_gptr, ""); }

/* Warp gw computes leaf gw % L of row gw / L into record gw of DST. */
static bool emit_leaves(gen *g)
{
    ent e;
    ent_begin(g, &e, CG_PTX_ENTRY_LEAVES);
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef gw = global_warp(&e), n_leaves = launch_word(&e, CG_PTX_L_LEAVES);
    LLVMValueRef total = LLVMBuildMul(b, launch_word(&e, CG_PTX_L_COUNT), n_leaves, "");
    LLVMBasicBlockRef cont = cg_if_begin(&e.g->e, LLVMBuildICmp(b, LLVMIntULT, gw, total, ""), "work");
    LLVMValueRef row = LLVMBuildUDiv(b, gw, n_leaves, "");
    LLVMValueRef leaf = LLVMBuildSub(b, gw, LLVMBuildMul(b, row, n_leaves, ""), "");
    rowc r;
    row_begin(&e, &r, row);
    LLVMValueRef start = LLVMBuildShl(b, leaf, ki64(g, LEAF_SHIFT), "");
    LLVMValueRef end = umin64(g, e.row_len, LLVMBuildAdd(b, start, ki64(g, KIR_LEAF), ""));
    LLVMValueRef v, p;
    /* element stores (none uses the stage's result: cg_ptx_has_multipass) at the positions the
     * lanes combine, from the same evaluation */
    bool ok = leaf_result(&e, &r, 0, start, end, cg_ptx_has_elem_stores(g->e.k), stage_group(g->e.k, 0), &v, &p);
    LLVMBasicBlockRef c2 = cg_if_begin(&e.g->e, LLVMBuildICmp(b, LLVMIntEQ, e.lane, ki64(g, 0), ""), "rec");
    rec_store(g, scratch(&e, CG_PTX_L_DST), gw, v, p);
    cg_if_end(&e.g->e, c2);
    cg_if_end(&e.g->e, cont);
    ent_end(&e);
    return ok;
}

/* Warp gw reduces chunk gw % DST_N (32 records, the identity past SRC_N) of row gw / DST_N
 * with the lane tree: records of aligned chunks of 2^5 leaves, so repeated passes give the
 * tree over all leaves (kernel.h: padding equals carrying). */
static bool emit_tree(gen *g)
{
    ent e;
    ent_begin(g, &e, CG_PTX_ENTRY_TREE);
    LLVMBuilderRef b = g->e.b;
    int comb = g->e.k->stages[0].combiner, t = stage_type(g->e.k, 0);
    LLVMValueRef gw = global_warp(&e), m = launch_word(&e, CG_PTX_L_SRC_N), m2 = launch_word(&e, CG_PTX_L_DST_N);
    LLVMValueRef total = LLVMBuildMul(b, launch_word(&e, CG_PTX_L_COUNT), m2, "");
    LLVMBasicBlockRef cont = cg_if_begin(&e.g->e, LLVMBuildICmp(b, LLVMIntULT, gw, total, ""), "work");
    LLVMValueRef row = LLVMBuildUDiv(b, gw, m2, "");
    LLVMValueRef c = LLVMBuildSub(b, gw, LLVMBuildMul(b, row, m2, ""), "");
    LLVMValueRef i = LLVMBuildAdd(b, LLVMBuildShl(b, c, ki64(g, 5), ""), e.lane, "");
    LLVMValueRef in = LLVMBuildICmp(b, LLVMIntULT, i, m, "");
    LLVMValueRef at = LLVMBuildAdd(b, LLVMBuildMul(b, row, m, ""), LLVMBuildSelect(b, in, i, ki64(g, 0), ""), "");
    LLVMValueRef v, p;
    rec_load(g, scratch(&e, CG_PTX_L_SRC), at, t, &v, &p);
    v = LLVMBuildSelect(b, in, v, cg_identity(&g->e, comb, t, 1), "");
    p = LLVMBuildSelect(b, in, p, ki64(g, INT64_MAX), "");
    warp_tree(&e, comb, t, &v, &p);
    LLVMBasicBlockRef c2 = cg_if_begin(&e.g->e, LLVMBuildICmp(b, LLVMIntEQ, e.lane, ki64(g, 0), ""), "rec");
    rec_store(g, scratch(&e, CG_PTX_L_DST), gw, v, p);
    cg_if_end(&e.g->e, c2);
    cg_if_end(&e.g->e, cont);
    ent_end(&e);
    return true;
}

/* Thread t does the row stores of row t from record t of SRC. */
static bool emit_finish(gen *g)
{
    ent e;
    ent_begin(g, &e, CG_PTX_ENTRY_FINISH);
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildMul(b, sreg(g, "ctaid.x"), sreg(g, "ntid.x"), ""), e.tid, "");
    LLVMBasicBlockRef cont =
        cg_if_begin(&e.g->e, LLVMBuildICmp(b, LLVMIntULT, row, launch_word(&e, CG_PTX_L_COUNT), ""), "work");
    rowc r;
    row_begin(&e, &r, row);
    LLVMValueRef v, p;
    rec_load(g, scratch(&e, CG_PTX_L_SRC), row, stage_type(g->e.k, 0), &v, &p);
    r.reduced[0] = stage_value(g, 0, v, p);
    bool ok = row_stores(&e, &r, LLVMConstInt(g->e.t_i1, 1, 0));
    cg_if_end(&e.g->e, cont);
    ent_end(&e);
    return ok;
}

/* ---- The module --------------------------------------------------------------------------- */

static LLVMValueRef shared_array(gen *g, const char *name, unsigned words)
{
    LLVMTypeRef t = LLVMArrayType2(g->e.t_i64, words);
    LLVMValueRef v = LLVMAddGlobalInAddressSpace(g->e.mod, t, name, 3);
    LLVMSetLinkage(v, LLVMInternalLinkage);
    LLVMSetInitializer(v, LLVMGetUndef(t));
    LLVMSetAlignment(v, 16);
    return v;
}

/* An NVVM annotation of entry fn: "maxnreg" caps its registers, "maxntidx" promises its block
 * size (so ptxas fits its registers to that many threads). */
static void annotate(gen *g, LLVMValueRef fn, const char *key, int value)
{
    LLVMValueRef ops[3] = {fn, LLVMMDStringInContext(g->e.ctx, key, (unsigned)strlen(key)), ki32(g, value)};
    LLVMAddNamedMetadataOperand(g->e.mod, "nvvm.annotations", LLVMMDNodeInContext(g->e.ctx, ops, 3));
}

/* No 64-bit float values or slots: what the register cap was measured on (f64 kernels spill
 * under it). */
static bool narrow(const kir_kernel *k)
{
    for (int s = 0; s < k->n_inputs; s++)
        if (cg_ptx_dtype_size(k->inputs[s].dtype) > 4)
            return false;
    for (int s = 0; s < k->n_outputs; s++)
        if (cg_ptx_dtype_size(k->outputs[s].dtype) > 4)
            return false;
    for (int i = 0; i < k->n_insts; i++)
        if (k->insts[i].type == KIR_F64 || k->insts[i].type == KIR_U64)
            return false;
    return true;
}

/* The input whose copy into shared memory also takes stage 0 (fast_stage), or -1: stage 0
 * is the max or min of a cached f32 input. */
static int fast_slot(const kir_kernel *k, const bool *cached)
{
    if (k->n_stages < 1)
        return -1;
    const kir_stage *st = &k->stages[0];
    const kir_inst *in = &k->insts[st->value];
    if ((st->combiner != KIR_COMBINE_MAX && st->combiner != KIR_COMBINE_MIN) || in->op != KIR_LOAD ||
        !cached[in->a] || k->inputs[in->a].dtype != BURNC_DTYPE_F32)
        return -1;
    return in->a;
}

/* The 16-bit tables as constant global arrays. */
static void lut_globals(gen *g)
{
    for (int i = 0; g->luts && i < g->luts->n; i++) {
        const cg_ptx_lut *l = &g->luts->lut[i];
        LLVMValueRef *v = malloc(CG_PTX_LUT_SIZE * sizeof *v);
        if (!v)
            continue; /* the store keeps its instructions */
        for (int j = 0; j < CG_PTX_LUT_SIZE; j++)
            v[j] = LLVMConstInt(g->e.t_i16, l->table[j], 0);
        LLVMTypeRef at = LLVMArrayType2(g->e.t_i16, CG_PTX_LUT_SIZE);
        char name[32];
        snprintf(name, sizeof name, "burnc_lut%d", i);
        LLVMValueRef gv = LLVMAddGlobalInAddressSpace(g->e.mod, at, name, 1);
        LLVMSetInitializer(gv, LLVMConstArray2(g->e.t_i16, v, CG_PTX_LUT_SIZE));
        free(v);
        LLVMSetGlobalConstant(gv, 1);
        LLVMSetLinkage(gv, LLVMInternalLinkage);
        LLVMSetAlignment(gv, 16);
        g->lut_of[l->store] = l;
        g->lut_data[l->store] = gv;
    }
}

static bool build_module(gen *g)
{
    if (cg_ptx_is_elementwise(g->e.k)) {
        lut_globals(g);
        return emit_ew(g);
    }
    g->sh_leaf = shared_array(g, "burnc_sh_leaf", 2 * W);
    g->sh_stack = shared_array(g, "burnc_sh_stack", 2 * STACK_DEPTH);
    g->sh_res = shared_array(g, "burnc_sh_res", 2);
    if (!early_stores(g) || !emit_rows_warp(g) || !emit_rows_block(g, false))
        return false;
    /* The warp-per-row entry at 64 registers: 4 blocks of 256 threads an SM (32 warps) instead
     * of 3 at ptxas's 72-80. The deep MLP's 4096 rows then fit in one wave instead of 1.29: on
     * the H200 its LayerNorm forward + GELU went 44-49 -> 41 us, the LayerNorm backward 25-27
     * -> 22 (at 56 registers: 43 and 22), the step 5.88-5.93 -> 5.80-5.82 ms; softmax, layer_norm
     * and train_mlp did not move. f64 kernels are left alone, as in the shared-memory entry. */
    if (narrow(g->e.k))
        annotate(g, LLVMGetNamedFunction(g->e.mod, CG_PTX_ENTRY_ROWS_WARP), "maxnreg", 64);
    if (cg_ptx_row_cached(g->e.k, g->cached) + cg_ptx_row_kept(g->e.k, g->kept) > 0) {
        cg_ptx_row_alias(g->e.k, g->cached, g->kept, g->alias);
        g->fast_slot = fast_slot(g->e.k, g->cached);
        g->sh_part = shared_array(g, "burnc_sh_part", W / 2); /* a float per warp */
        LLVMTypeRef t = LLVMArrayType2(g->e.t_i8, 0);
        g->sh_dyn = LLVMAddGlobalInAddressSpace(g->e.mod, t, "burnc_sh_dyn", 3);
        LLVMSetLinkage(g->sh_dyn, LLVMExternalLinkage);
        LLVMSetAlignment(g->sh_dyn, 16);
        if (!emit_rows_block(g, true))
            return false;
        /* the shared-memory row entry runs one block per row and overlaps one row's memory
         * phases with other rows' arithmetic only with several blocks per SM; 40 registers keep
         * 6 blocks of 256 threads (65536 registers per H200 SM), where ptxas would take up to 48
         * for the last few percent of a row's speed (1024 threads have 64 at most anyway) */
        if (g->block <= 512 && narrow(g->e.k))
            annotate(g, LLVMGetNamedFunction(g->e.mod, CG_PTX_ENTRY_ROWS_SMEM), "maxnreg", 40);
    }
    if (cg_ptx_has_cols(g->e.k)) {
        /* 43 KB at 16 or 32 rows a block, under the 48 KB of static shared memory */
        unsigned cols = 1u << g->cols_shift;
        g->sh_cols = shared_array(g, "burnc_sh_cols", 2 * (unsigned)g->cols_threads); /* a record a thread */
        unsigned per_pass = (unsigned)cg_ptx_cols_pass_max((int)cols); /* a stack a row and stage of a pass */
        g->sh_cstack = shared_array(g, "burnc_sh_cstack", 2 * cols * CSTACK_DEPTH * per_pass);
        g->sh_cres = shared_array(g, "burnc_sh_cres", 2 * (unsigned)g->cols_threads / W); /* a record a warp */
        if (!emit_cols(g))
            return false;
        /* up to 1024 threads: without the promise ptxas may take more than 64 registers, and
         * the launch fails for want of them */
        annotate(g, LLVMGetNamedFunction(g->e.mod, CG_PTX_ENTRY_COLS), "maxntidx", g->cols_threads);
    }
    if (cg_ptx_has_multipass(g->e.k))
        return emit_leaves(g) && emit_tree(g) && emit_finish(g);
    return true;
}

static void gen_types(gen *g)
{
    LLVMContextRef c = g->e.ctx;
    g->t_gptr = LLVMPointerTypeInContext(c, 1);
    g->md_invariant = LLVMGetMDKindIDInContext(c, "invariant.load", 14);
}

static pthread_once_t nvptx_once = PTHREAD_ONCE_INIT;
static void nvptx_init(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

/* The newest target LLVM 19 knows at or below sm: a newer GPU JITs older PTX (the driver
 * compiles compute_90 PTX for sm_100). */
static int llvm_sm(int sm)
{
    static const int known[] = {90, 89, 87, 86, 80, 75, 72, 70};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (sm >= known[i])
            return known[i];
    return 0;
}

LLVMTargetMachineRef cg_nvptx_tm(int sm, bool arch_a, const char *what, char *err, size_t cap)
{
    pthread_once(&nvptx_once, nvptx_init);
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(CG_NVPTX_TRIPLE, &target, &msg)) {
        cg_failf(err, cap, "%s: no NVPTX target in this LLVM: %s", what, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    char cpu[16];
    snprintf(cpu, sizeof cpu, "sm_%d%s", arch_a ? 90 : llvm_sm(sm), arch_a ? "a" : "");
    return LLVMCreateTargetMachine(target, CG_NVPTX_TRIPLE, cpu, "+ptx85", LLVMCodeGenLevelAggressive,
                                   LLVMRelocDefault, LLVMCodeModelDefault);
}

void cg_ptx_grid_dependency(LLVMContextRef ctx, LLVMBuilderRef b, int sm)
{
    if (sm < 90)
        return;
    static const char text[] = "griddepcontrol.wait;", cons[] = "~{memory}";
    LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(ctx), NULL, 0, 0);
    LLVMValueRef f = LLVMGetInlineAsm(ft, text, sizeof text - 1, cons, sizeof cons - 1, 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMBuildCall2(b, ft, f, NULL, 0, "");
}

static bool ptx_options(const kir_kernel *k, const cg_ptx_options *opt, gen *g, char *err, size_t cap)
{
    if (!opt)
        return cg_failf(err, cap, "compile_ptx %s: no options (the compute capability is required)", k->name);
    if (opt->sm < 70)
        return cg_failf(err, cap, "compile_ptx %s: compute capability %d.%d is below 7.0, the oldest supported",
                        k->name, opt->sm / 10, opt->sm % 10);
    if (opt->block && (opt->block < 64 || opt->block > 1024 || opt->block % 32))
        return cg_failf(err, cap, "compile_ptx %s: block %d is not a multiple of 32 in [64, 1024]", k->name,
                        opt->block);
    if (opt->items && opt->items != 1 && opt->items != 2 && opt->items != 4 && opt->items != 8)
        return cg_failf(err, cap, "compile_ptx %s: items %d is not 1, 2, 4 or 8", k->name, opt->items);
    if (opt->rows_per_block && (opt->rows_per_block < 1 || opt->rows_per_block > 32))
        return cg_failf(err, cap, "compile_ptx %s: rows_per_block %d is not in [1, 32]", k->name, opt->rows_per_block);
    g->sm = opt->sm;
    g->items = opt->items ? opt->items : cg_ptx_default_items(k);
    g->rows_per_block = opt->rows_per_block ? opt->rows_per_block : CG_PTX_DEFAULT_ROWS_PER_BLOCK;
    g->block = opt->block ? opt->block : CG_PTX_DEFAULT_BLOCK;
    g->cols_shift = ilog2(cg_ptx_cols(opt));
    g->cols_threads = cg_ptx_cols_threads(k, opt);
    g->lay = cg_ptx_params_layout(k);
    if (g->lay.n_words > CG_PTX_MAX_PARAM_WORDS)
        return cg_failf(err, cap, "compile_ptx %s: %d parameter words, more than %d", k->name, g->lay.n_words,
                        CG_PTX_MAX_PARAM_WORDS);
    for (int o = 0; o < k->n_outputs; o++)
        if (k->in_place[o] > k->n_inputs)
            return cg_failf(err, cap, "compile_ptx %s: output %d overwrites input %d of %d", k->name, o,
                            k->in_place[o] - 1, k->n_inputs);
        else if (k->in_place[o])
            g->writable_input[k->in_place[o] - 1] = true;
    return true;
}

/* What a table claims, checked against the kernel (cg_ptx_lut_source made it). */
static bool luts_ok(const kir_kernel *k, const cg_ptx_luts *l, char *err, size_t cap)
{
    bool taken[KIR_MAX_OUTPUTS] = {0};
    for (int i = 0; l && i < l->n; i++) {
        const cg_ptx_lut *x = &l->lut[i];
        if (!cg_ptx_is_elementwise(k) || x->store < 0 || x->store >= k->n_stores || taken[x->store] || !x->table ||
            x->src < 0 || x->src >= k->stores[x->store].value || k->insts[x->src].type != KIR_F32 ||
            (x->src_dt != BURNC_DTYPE_F16 && x->src_dt != BURNC_DTYPE_BF16) ||
            cg_ptx_dtype_size(k->outputs[k->stores[x->store].slot].dtype) != 2)
            return cg_failf(err, cap, "compile_ptx %s: 16-bit table %d does not fit the kernel", k->name, i);
        taken[x->store] = true;
    }
    return true;
}

bool cg_llvm_compile_ptx(const kir_kernel *k, const cg_ptx_options *opt, const cg_ptx_luts *luts, char **ptx,
                         size_t *ptx_size, char *err, size_t cap);
bool cg_llvm_compile_ptx(const kir_kernel *k, const cg_ptx_options *opt, const cg_ptx_luts *luts, char **ptx,
                         size_t *ptx_size, char *err, size_t cap)
{
    if (ptx)
        *ptx = NULL;
    if (ptx_size)
        *ptx_size = 0;
    if (!ptx)
        return cg_failf(err, cap, "compile_ptx: no output");
    if (!cg_check_kernel(k, "compile_ptx", err, cap))
        return false;
    gen g = {.e = {.k = k}, .fast_slot = -1, .luts = luts};
    if (!ptx_options(k, opt, &g, err, cap) || !luts_ok(k, luts, err, cap))
        return false;
    LLVMTargetMachineRef tm = cg_nvptx_tm(opt->sm, false, "compile_ptx", err, cap);
    if (!tm)
        return false;
    cg_module_begin(&g.e, tm, CG_NVPTX_TRIPLE, k->name[0] ? k->name : "burnc_kernel");
    gen_types(&g);
    bool ok = build_module(&g);
    free(g.readback);
    char what[sizeof k->name + 16];
    snprintf(what, sizeof what, "compile_ptx %s", k->name);
    if (!ok)
        cg_failf(err, cap, "%s: out of memory while building the IR", what);
    ok = ok && cg_emit_module(g.e.mod, tm, "default<O3>", false, what, ptx, ptx_size, err, cap);
    cg_module_end(&g.e, tm);
    return ok;
}
