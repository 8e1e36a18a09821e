/* The CPU code generator: kernel IR -> LLVM IR -> default<O3> with the host's target machine ->
 * one relocatable ELF object, which ORC LLJIT links into this process and the disk cache keeps
 * for later processes (codegen/objload.c maps the same bytes without LLVM).
 *
 * This file is the shared module burnc-llvm, opened with dlopen by libburnc only when something
 * must be compiled. It includes the kernel IR and codegen headers only and calls nothing in
 * libburnc (whose internal symbols are hidden), so it restates the few type facts it needs.
 *
 * The semantics are kernel.h's, with the choices ir/kernel_eval.c makes (the oracle: results
 * must equal it bitwise). No fast-math flags, no reassociation: every reduction runs in exactly
 * the order kernel.h fixes, with the KIR_LANES lanes held in one vector accumulator. f16 and
 * bf16 conversions are integer code, so they round once, ignore the MXCSR state and need no
 * compiler-rt helper (which the object loader could not resolve).
 *
 * Code shape. Every function walks a flat range of positions of some axes in row-major order
 * as "runs" along the innermost axis; what an instruction depends on decides where it is
 * computed: level 0 once per call (constants, arguments, row-level values, loads whose strides
 * are ZERO on every walked axis), level 1 once per run, level 2 at every position of the run.
 * Level 2 is emitted for several positions at once (one emitter, any width): element stores
 * in steps of 16 lanes (8 without AVX-512) then a scalar tail, reduction stages in steps of
 * KIR_LANES lanes, one lane per accumulator lane; UNIT strides become contiguous vector loads
 * and stores, ANY strides gathers. Those loops are marked so that the loop vectorizer leaves
 * them alone (it would add a third copy of the body and little else). A reduction whose inputs
 * are contiguous across rows rather than along them runs groups of rows with one vector lane
 * per row instead ("Columns"). */
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cg.h"
#include "codegen/llvm_emit.h"
#include "codegen/llvm_host.h"

#define CG_EXPORT __attribute__((visibility("default")))

enum { W = KIR_LANES, LEAF_SHIFT = 12, STACK_DEPTH = 64, STASH_MAX = 16384, STASH_VALUES = 2, COLS = KIR_LANES };
_Static_assert(KIR_LEAF == 1 << LEAF_SHIFT, "leaf size is a power of two");

/* ---- Errors and timings ------------------------------------------------------------------ */

bool cg_failf(char *err, size_t cap, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool cg_buffer_text(LLVMMemoryBufferRef mb, bool keep_nul, char **out, size_t *size, const char *what, char *err,
                    size_t cap)
{
    size_t n = LLVMGetBufferSize(mb);
    *out = malloc(n + 1);
    if (!*out) {
        LLVMDisposeMemoryBuffer(mb);
        return cg_failf(err, cap, "%s: no memory for %zu bytes of output", what, n);
    }
    memcpy(*out, LLVMGetBufferStart(mb), n);
    (*out)[n] = '\0';
    while (!keep_nul && n > 0 && (*out)[n - 1] == '\0')
        n--;
    if (size)
        *size = n;
    LLVMDisposeMemoryBuffer(mb);
    return true;
}

/* Takes the error: its message into err. */
static bool fail_llvm(char *err, size_t cap, const char *what, LLVMErrorRef e)
{
    char *msg = LLVMGetErrorMessage(e);
    cg_failf(err, cap, "%s: %s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return false;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Phase times of the calling thread's last compile_cpu (cg.h has no field for them yet). */
typedef struct cg_llvm_times {
    double ir_ms, opt_ms, codegen_ms, link_ms;
} cg_llvm_times;
static _Thread_local cg_llvm_times last_times;

/* ---- Module-wide emission state ---------------------------------------------------------- */

typedef struct gen {
    cg_emit e; /* what the shared lowering (llvm_emit.c) needs */
    unsigned md_scope, md_noalias, md_loop, md_nontemporal;
    int elem_width; /* lanes of the element-store loops' vector steps */
    /* Outputs never alias inputs or each other (the fusion pass's promise): input loads are in
     * scope "in", each output's stores in their own scope. */
    LLVMValueRef load_scope, load_noalias;
    LLVMValueRef store_scope[KIR_MAX_OUTPUTS], store_noalias[KIR_MAX_OUTPUTS];
    bool has_elem, has_row;
    LLVMTypeRef leaf_ty, elem_ty, finish_ty;
    LLVMValueRef leaf_fn[KIR_MAX_STAGES], elem_fn, finish_fn, cols_elem_fn;
    int n_stash;                 /* values the last stage keeps for the element stores */
    int32_t stash[STASH_VALUES]; /* their instructions */
    bool cols;                   /* stages also run COLS adjacent rows at once (see "Columns") */
    LLVMValueRef cols_fn[KIR_MAX_STAGES];
} gen;

/* ---- Constants and small builders -------------------------------------------------------- */


static LLVMValueRef splat(gen *g, LLVMValueRef s, int w)
{
    if (w == 1)
        return s;
    if (LLVMIsConstant(s))
        return ksplat(s, w);
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)w);
    LLVMValueRef v = LLVMBuildInsertElement(g->e.b, LLVMGetPoison(vt), s, LLVMConstInt(g->e.t_i32, 0, 0), "");
    return LLVMBuildShuffleVector(g->e.b, v, LLVMGetPoison(vt), LLVMConstNull(LLVMVectorType(g->e.t_i32, (unsigned)w)),
                                  "");
}

static LLVMValueRef iota(gen *g, int w)
{
    LLVMValueRef a[W];
    for (int i = 0; i < w; i++)
        a[i] = LLVMConstInt(g->e.t_i64, (unsigned long long)i, 0);
    return LLVMConstVector(a, (unsigned)w);
}

static LLVMValueRef umin(gen *g, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntULT, a, b, ""), a, b, "");
}

static LLVMMetadataRef md_str(gen *g, const char *s) { return LLVMMDStringInContext2(g->e.ctx, s, strlen(s)); }

static void tag(gen *g, LLVMValueRef inst, LLVMValueRef scope, LLVMValueRef noalias)
{
    if (scope)
        LLVMSetMetadata(inst, g->md_scope, scope);
    if (noalias)
        LLVMSetMetadata(inst, g->md_noalias, noalias);
}

/* The pairwise tree over the lanes of a <W x T> accumulator: lane 2i with 2i+1, and so on. */
static void lane_tree(gen *g, int comb, int t, LLVMValueRef *v, LLVMValueRef *p)
{
    LLVMBuilderRef b = g->e.b;
    for (int w = W; w > 1; w /= 2) {
        LLVMValueRef even[W / 2], odd[W / 2];
        for (int i = 0; i < w / 2; i++) {
            even[i] = LLVMConstInt(g->e.t_i32, (unsigned long long)(2 * i), 0);
            odd[i] = LLVMConstInt(g->e.t_i32, (unsigned long long)(2 * i + 1), 0);
        }
        LLVMValueRef me = LLVMConstVector(even, (unsigned)(w / 2)), mo = LLVMConstVector(odd, (unsigned)(w / 2));
        LLVMValueRef lv = LLVMBuildShuffleVector(b, *v, LLVMGetPoison(LLVMTypeOf(*v)), me, "");
        LLVMValueRef rv = LLVMBuildShuffleVector(b, *v, LLVMGetPoison(LLVMTypeOf(*v)), mo, "");
        LLVMValueRef lp = NULL, rp = NULL;
        if (is_arg_comb(comb)) {
            lp = LLVMBuildShuffleVector(b, *p, LLVMGetPoison(LLVMTypeOf(*p)), me, "");
            rp = LLVMBuildShuffleVector(b, *p, LLVMGetPoison(LLVMTypeOf(*p)), mo, "");
        }
        cg_combine(&g->e, comb, t, lv, lp, rv, rp, v, p);
    }
    LLVMValueRef zero = LLVMConstInt(g->e.t_i32, 0, 0);
    *v = LLVMBuildExtractElement(b, *v, zero, "");
    if (is_arg_comb(comb))
        *p = LLVMBuildExtractElement(b, *p, zero, "");
}

/* ---- One function's emission state ------------------------------------------------------- */

typedef struct fnc fnc;
typedef void (*body_fn)(fnc *c, LLVMValueRef k0, LLVMValueRef k1, LLVMValueRef p0);

struct fnc {
    gen *g;
    LLVMValueRef fn;
    LLVMBasicBlockRef entry;
    LLVMBuilderRef ab; /* allocas, at the top of the entry block */
    int inner;         /* the run loop's innermost axis; -1 when it walks no axis */
    int8_t axis_level[BURNC_MAX_RANK];
    LLVMValueRef extent[BURNC_MAX_RANK], idx[BURNC_MAX_RANK], kin;
    LLVMValueRef in_base[KIR_MAX_INPUTS], out_base[KIR_MAX_OUTPUTS];
    LLVMValueRef in_off[2][KIR_MAX_INPUTS], out_off[2][KIR_MAX_OUTPUTS]; /* by level 0 / 1 */
    LLVMValueRef in_stride[KIR_MAX_INPUTS][BURNC_MAX_RANK], out_stride[KIR_MAX_OUTPUTS][BURNC_MAX_RANK];
    LLVMValueRef scalars, row_len, reduced[KIR_MAX_STAGES];
    LLVMValueRef stream; /* kir_args.stream */
    bool row_outputs; /* stores address the outer axes only */
    uint8_t *need;
    int8_t *level;
    LLVMValueRef *sv, *vv, *spl; /* scalar values; vector values and splats in the vector body */
    int stage;
    LLVMValueRef acc, accp;
    LLVMValueRef stash; /* the row's stash (may be null at run time), or NULL: none */
    LLVMValueRef jbase; /* row position = jbase + k in the element-store loops */
    const uint8_t *cut; /* instructions read from the stash instead of computed, or NULL */
    bool prefetch;      /* the leaf steps prefetch the next row's inputs */
    bool cols;          /* vector lanes are COLS adjacent rows (the last outer axis), not positions */
};

static LLVMBasicBlockRef block(fnc *c, const char *name)
{
    return LLVMAppendBasicBlockInContext(c->g->e.ctx, c->fn, name);
}

static LLVMValueRef entry_alloca(fnc *c, LLVMTypeRef t) { return LLVMBuildAlloca(c->ab, t, ""); }

static LLVMValueRef load_i64(gen *g, LLVMValueRef base, int64_t i)
{
    LLVMValueRef idx = LLVMConstInt(g->e.t_i64, (unsigned long long)i, 0);
    return LLVMBuildLoad2(g->e.b, g->e.t_i64, LLVMBuildGEP2(g->e.b, g->e.t_i64, base, &idx, 1, ""), "");
}

static LLVMValueRef load_ptr(gen *g, LLVMValueRef base, int64_t i)
{
    LLVMValueRef idx = LLVMConstInt(g->e.t_i64, (unsigned long long)i, 0);
    return LLVMBuildLoad2(g->e.b, g->e.t_ptr, LLVMBuildGEP2(g->e.b, g->e.t_ptr, base, &idx, 1, ""), "");
}

static LLVMValueRef args_field(gen *g, LLVMValueRef args, size_t offset)
{
    LLVMValueRef off = LLVMConstInt(g->e.t_i64, offset, 0);
    return LLVMBuildLoad2(g->e.b, g->e.t_ptr, LLVMBuildGEP2(g->e.b, g->e.t_i8, args, &off, 1, ""), "");
}

static LLVMValueRef fn_begin(gen *g, fnc *c, const char *name, LLVMTypeRef fty, bool internal)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->fn = LLVMAddFunction(g->e.mod, name, fty);
    if (internal)
        LLVMSetLinkage(c->fn, LLVMInternalLinkage);
    unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
    LLVMAddAttributeAtIndex(c->fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(g->e.ctx, nounwind, 0));
    c->entry = block(c, "entry");
    LLVMPositionBuilderAtEnd(g->e.b, c->entry);
    c->ab = LLVMCreateBuilderInContext(g->e.ctx);
    /* A placeholder keeps the alloca builder above everything else in the entry block. */
    LLVMValueRef mark = LLVMBuildAlloca(g->e.b, g->e.t_i8, "");
    LLVMPositionBuilderBefore(c->ab, mark);
    size_t n = (size_t)(g->e.k->n_insts > 0 ? g->e.k->n_insts : 1);
    c->need = calloc(n, 1);
    c->level = calloc(n, 1);
    c->sv = calloc(n, sizeof *c->sv);
    c->vv = calloc(n, sizeof *c->vv);
    c->spl = calloc(n, sizeof *c->spl);
    return c->fn;
}

static bool fn_ok(const fnc *c) { return c->need && c->level && c->sv && c->vv && c->spl; }

static void fn_end(fnc *c)
{
    LLVMDisposeBuilder(c->ab);
    free(c->need);
    free(c->level);
    free(c->sv);
    free(c->vv);
    free(c->spl);
}

/* Loads what every function reads from kir_args: base addresses, extents, offsets, the
 * strides of ANY classes (ZERO and UNIT read nothing, as in kir_eval). All at the entry, before
 * any store, so alias analysis never has to reason about them. */
static void load_launch(fnc *c, LLVMValueRef args)
{
    gen *g = c->g;
    const kir_kernel *k = g->e.k;
    LLVMValueRef ins = args_field(g, args, offsetof(kir_args, inputs));
    LLVMValueRef outs = args_field(g, args, offsetof(kir_args, outputs));
    LLVMValueRef ext = args_field(g, args, offsetof(kir_args, extents));
    LLVMValueRef in_offs = args_field(g, args, offsetof(kir_args, in_offsets));
    LLVMValueRef in_str = args_field(g, args, offsetof(kir_args, in_strides));
    LLVMValueRef out_offs = args_field(g, args, offsetof(kir_args, out_offsets));
    LLVMValueRef out_str = args_field(g, args, offsetof(kir_args, out_strides));
    c->scalars = args_field(g, args, offsetof(kir_args, scalars));
    LLVMValueRef soff = LLVMConstInt(g->e.t_i64, offsetof(kir_args, stream), 0);
    c->stream = LLVMBuildLoad2(g->e.b, g->e.t_i32, LLVMBuildGEP2(g->e.b, g->e.t_i8, args, &soff, 1, ""), "");
    for (int d = 0; d < k->rank; d++)
        c->extent[d] = load_i64(g, ext, d);
    for (int s = 0; s < k->n_inputs; s++) {
        c->in_base[s] = load_ptr(g, ins, s);
        c->in_off[0][s] = load_i64(g, in_offs, s);
        for (int d = 0; d < k->rank; d++) {
            uint8_t cls = k->inputs[s].stride[d];
            c->in_stride[s][d] = cls == KIR_STRIDE_ZERO   ? NULL
                                 : cls == KIR_STRIDE_UNIT ? LLVMConstInt(g->e.t_i64, 1, 0)
                                                          : load_i64(g, in_str, (int64_t)s * k->rank + d);
        }
    }
    for (int s = 0; s < k->n_outputs; s++) {
        c->out_base[s] = load_ptr(g, outs, s);
        c->out_off[0][s] = load_i64(g, out_offs, s);
        for (int d = 0; d < k->rank; d++) {
            uint8_t cls = k->outputs[s].stride[d];
            c->out_stride[s][d] = cls == KIR_STRIDE_ZERO   ? NULL
                                  : cls == KIR_STRIDE_UNIT ? LLVMConstInt(g->e.t_i64, 1, 0)
                                                           : load_i64(g, out_str, (int64_t)s * k->rank + d);
        }
    }
    LLVMValueRef n = LLVMConstInt(g->e.t_i64, 1, 0);
    for (int d = k->n_outer; d < k->rank; d++)
        n = LLVMBuildMul(g->e.b, n, c->extent[d], "");
    c->row_len = n;
}

/* Positions along axes [from, to) of flat index `flat` (row-major); returns what is left. */
static LLVMValueRef decompose(fnc *c, LLVMValueRef flat, int from, int to, LLVMValueRef *out_idx, LLVMValueRef *mem)
{
    LLVMBuilderRef b = c->g->e.b;
    for (int d = to - 1; d >= from; d--) {
        LLVMValueRef q = LLVMBuildUDiv(b, flat, c->extent[d], "");
        LLVMValueRef r = LLVMBuildSub(b, flat, LLVMBuildMul(b, q, c->extent[d], ""), "");
        if (out_idx)
            out_idx[d] = r;
        if (mem)
            LLVMBuildStore(b, r, mem[d]);
        flat = q;
    }
    return flat;
}

/* ---- Levels: where each instruction is computed ------------------------------------------ */

static int slot_level(const fnc *c, const kir_slot *s)
{
    int l = 0;
    for (int d = 0; d < c->g->e.k->rank; d++)
        if (s->stride[d] != KIR_STRIDE_ZERO && c->axis_level[d] > l)
            l = c->axis_level[d];
    return l;
}

/* Marks in `need` what `roots` need, not looking past the instructions in `cut` (may be NULL). */
static void mark_needed(const kir_kernel *k, const int32_t *roots, int n_roots, const uint8_t *cut, uint8_t *need)
{
    for (int r = 0; r < n_roots; r++)
        need[roots[r]] = 1;
    for (int i = k->n_insts - 1; i >= 0; i--) {
        if (!need[i] || (cut && cut[i]))
            continue;
        const kir_inst *in = &k->insts[i];
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            need[ops[j]] = 1;
    }
}

/* Marks what `roots` need and computes each needed instruction's level. */
static void analyze(fnc *c, const int32_t *roots, int n_roots)
{
    const kir_kernel *k = c->g->e.k;
    mark_needed(k, roots, n_roots, NULL, c->need);
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        int l = 0;
        if (in->op == KIR_LOAD)
            l = slot_level(c, &k->inputs[in->a]);
        else if (in->op == KIR_INDEX)
            l = c->axis_level[in->a];
        else if (in->op == KIR_REDUCED && c->cols)
            l = 2; /* one result per row, so one per lane */
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            if (c->level[ops[j]] > l)
                l = c->level[ops[j]];
        c->level[i] = (int8_t)l;
    }
}

/* Offsets of every slot with the contributions of the axes at `lvl` added (level 0 starts
 * from the offset argument, level 1 from level 0's). */
static void slot_offsets(fnc *c, int lvl)
{
    gen *g = c->g;
    const kir_kernel *k = g->e.k;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? k->n_outputs : k->n_inputs;
        for (int s = 0; s < n; s++) {
            LLVMValueRef off = pass ? c->out_off[0][s] : c->in_off[0][s];
            int last = pass && c->row_outputs ? k->n_outer : k->rank;
            for (int d = 0; d < last; d++) {
                LLVMValueRef st = pass ? c->out_stride[s][d] : c->in_stride[s][d];
                if (!st || c->axis_level[d] != lvl)
                    continue;
                off = LLVMBuildAdd(g->e.b, off, LLVMBuildMul(g->e.b, c->idx[d], st, ""), "");
            }
            if (pass)
                c->out_off[lvl][s] = off;
            else
                c->in_off[lvl][s] = off;
        }
    }
}

/* ---- Emitting instructions --------------------------------------------------------------- */

static LLVMValueRef operand(fnc *c, int j, int w)
{
    if (w == 1)
        return c->sv[j];
    if (c->level[j] == 2)
        return c->vv[j];
    if (!c->spl[j])
        c->spl[j] = splat(c->g, c->sv[j], w);
    return c->spl[j];
}

/* A load at reduced position kin (inner axis) for w adjacent rows: lanes step along the last
 * outer axis from the group's first row (idx), so a UNIT stride there is one vector load. */
static LLVMValueRef emit_load_cols(fnc *c, int slot, int w)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *k = g->e.k;
    int o = k->n_outer - 1;
    burnc_dtype_t dt = k->inputs[slot].dtype;
    LLVMTypeRef mt = cg_mem_ty(&g->e, dt);
    LLVMValueRef off = c->in_off[1][slot], si = c->in_stride[slot][c->inner], so = c->in_stride[slot][o];
    if (si)
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, c->kin, si, ""), "");
    LLVMValueRef raw;
    if (!so) {
        raw = LLVMBuildLoad2(b, mt, LLVMBuildGEP2(b, mt, c->in_base[slot], &off, 1, ""), "");
        LLVMSetAlignment(raw, cg_mem_align(dt));
        tag(g, raw, g->load_scope, g->load_noalias);
        return splat(g, cg_from_mem(&g->e, raw, dt, 1), w);
    }
    off = LLVMBuildAdd(b, off, LLVMBuildMul(b, c->idx[o], so, ""), "");
    if (k->inputs[slot].stride[o] == KIR_STRIDE_UNIT) {
        raw = LLVMBuildLoad2(b, vty(mt, w), LLVMBuildGEP2(b, mt, c->in_base[slot], &off, 1, ""), "");
        LLVMSetAlignment(raw, cg_mem_align(dt));
    } else {
        LLVMValueRef offs = LLVMBuildAdd(b, splat(g, off, w), LLVMBuildMul(b, iota(g, w), splat(g, so, w), ""), "");
        LLVMValueRef ptrs = LLVMBuildGEP2(b, mt, c->in_base[slot], &offs, 1, "");
        LLVMTypeRef tys[2] = {vty(mt, w), LLVMTypeOf(ptrs)};
        LLVMValueRef args[4] = {ptrs, LLVMConstInt(g->e.t_i32, cg_mem_align(dt), 0), kint(g->e.t_i1, 1, w),
                                LLVMGetPoison(vty(mt, w))};
        raw = cg_call_intrinsic(&g->e, "llvm.masked.gather", tys, 2, args, 4);
    }
    tag(g, raw, g->load_scope, g->load_noalias);
    return cg_from_mem(&g->e, raw, dt, w);
}

static LLVMValueRef emit_load(fnc *c, int slot, int lvl, int w)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    burnc_dtype_t dt = g->e.k->inputs[slot].dtype;
    LLVMTypeRef mt = cg_mem_ty(&g->e, dt);
    LLVMValueRef raw;
    if (c->cols && lvl == 2)
        return emit_load_cols(c, slot, w);
    if (lvl < 2 || w == 1) {
        LLVMValueRef off = c->in_off[lvl < 2 ? lvl : 1][slot];
        if (lvl == 2)
            off = LLVMBuildAdd(b, off, LLVMBuildMul(b, c->kin, c->in_stride[slot][c->inner], ""), "");
        raw = LLVMBuildLoad2(b, mt, LLVMBuildGEP2(b, mt, c->in_base[slot], &off, 1, ""), "");
        LLVMSetAlignment(raw, cg_mem_align(dt));
        tag(g, raw, g->load_scope, g->load_noalias);
    } else if (g->e.k->inputs[slot].stride[c->inner] == KIR_STRIDE_UNIT) {
        LLVMValueRef off = LLVMBuildAdd(b, c->in_off[1][slot], c->kin, "");
        raw = LLVMBuildLoad2(b, vty(mt, w), LLVMBuildGEP2(b, mt, c->in_base[slot], &off, 1, ""), "");
        LLVMSetAlignment(raw, cg_mem_align(dt));
        tag(g, raw, g->load_scope, g->load_noalias);
    } else {
        LLVMValueRef st = c->in_stride[slot][c->inner];
        LLVMValueRef pos = LLVMBuildAdd(b, splat(g, c->kin, w), iota(g, w), "");
        LLVMValueRef off =
            LLVMBuildAdd(b, splat(g, c->in_off[1][slot], w), LLVMBuildMul(b, pos, splat(g, st, w), ""), "");
        LLVMValueRef ptrs = LLVMBuildGEP2(b, mt, c->in_base[slot], &off, 1, "");
        LLVMTypeRef tys[2] = {vty(mt, w), LLVMTypeOf(ptrs)};
        LLVMValueRef args[4] = {ptrs, LLVMConstInt(g->e.t_i32, cg_mem_align(dt), 0), kint(g->e.t_i1, 1, w),
                                LLVMGetPoison(vty(mt, w))};
        raw = cg_call_intrinsic(&g->e, "llvm.masked.gather", tys, 2, args, 4);
        tag(g, raw, g->load_scope, g->load_noalias);
    }
    return cg_from_mem(&g->e, raw, dt, w);
}

/* kir_scalar -> a value of type t (the ARG and stage-result encodings). */
static LLVMValueRef scalar_in(gen *g, LLVMValueRef base, int64_t i, int t)
{
    LLVMValueRef idx = LLVMConstInt(g->e.t_i64, (unsigned long long)i, 0);
    LLVMValueRef p = LLVMBuildGEP2(g->e.b, g->e.t_i64, base, &idx, 1, "");
    if (t_fp(t)) {
        LLVMValueRef d = LLVMBuildLoad2(g->e.b, g->e.t_f64, p, "");
        return t == KIR_F32 ? LLVMBuildFPTrunc(g->e.b, d, g->e.t_f32, "") : d;
    }
    LLVMValueRef u = LLVMBuildLoad2(g->e.b, g->e.t_i64, p, "");
    if (t == KIR_BOOL)
        return LLVMBuildICmp(g->e.b, LLVMIntNE, u, LLVMConstInt(g->e.t_i64, 0, 0), "");
    return t == KIR_I64 || t == KIR_U64 ? u : LLVMBuildTrunc(g->e.b, u, cg_ty_of(&g->e, t), "");
}

/* A value of type t -> its kir_scalar (f32 widened into .f, integers canonical). */
static void scalar_out(gen *g, LLVMValueRef v, int t, LLVMValueRef p)
{
    if (t == KIR_F32)
        v = LLVMBuildFPExt(g->e.b, v, g->e.t_f64, "");
    else if (!t_fp(t) && t != KIR_I64 && t != KIR_U64)
        v = t_sint(t) ? LLVMBuildSExt(g->e.b, v, g->e.t_i64, "") : LLVMBuildZExt(g->e.b, v, g->e.t_i64, "");
    LLVMBuildStore(g->e.b, v, p);
}

/* ---- The stash ----------------------------------------------------------------------------
 * A row kernel whose last stage and element stores share costly per-position work (softmax:
 * e^(x - max) is summed, then divided by the sum) computes it once: the last stage's leaves
 * write the shared values that the element stores use directly to a per-row buffer on the
 * stack, and the element stores read them back. The same instructions give the same bits at
 * any width, so results do not change. The rows function passes the buffer only for rows of
 * at most STASH_MAX positions; without it both functions compute everything. */

/* The address of stashed value v at row position j. */
static LLVMValueRef stash_at(fnc *c, int v, LLVMValueRef j)
{
    gen *g = c->g;
    LLVMValueRef vbase = LLVMConstInt(g->e.t_i64, (unsigned long long)v * STASH_MAX, 0);
    LLVMValueRef base = LLVMBuildGEP2(g->e.b, g->e.t_i64, c->stash, &vbase, 1, "");
    return LLVMBuildGEP2(g->e.b, cg_ty_of(&g->e, g->e.k->insts[g->stash[v]].type), base, &j, 1, "");
}

static int stash_index(const gen *g, int i)
{
    for (int v = 0; v < g->n_stash; v++)
        if (g->stash[v] == i)
            return v;
    return -1;
}

/* Instruction i read back at position jbase + kin, w lanes. */
static LLVMValueRef stash_load(fnc *c, int i, int w)
{
    gen *g = c->g;
    LLVMTypeRef et = cg_ty_of(&g->e, g->e.k->insts[i].type);
    LLVMValueRef j = LLVMBuildAdd(g->e.b, c->jbase, c->kin, "");
    LLVMValueRef v = LLVMBuildLoad2(g->e.b, vty(et, w), stash_at(c, stash_index(g, i), j), "");
    LLVMSetAlignment(v, (unsigned)LLVMABISizeOfType(LLVMGetModuleDataLayout(g->e.mod), et));
    return v;
}

/* The stashed values of the current step (w lanes from row position j), when the row has a
 * stash. */
static void stash_stores(fnc *c, LLVMValueRef j, int w)
{
    gen *g = c->g;
    if (!c->stash)
        return;
    LLVMBasicBlockRef yes = block(c, "stash"), no = block(c, "stashed");
    LLVMBuildCondBr(g->e.b, LLVMBuildIsNotNull(g->e.b, c->stash, ""), yes, no);
    LLVMPositionBuilderAtEnd(g->e.b, yes);
    for (int v = 0; v < g->n_stash; v++) {
        LLVMTypeRef et = cg_ty_of(&g->e, g->e.k->insts[g->stash[v]].type);
        LLVMValueRef st = LLVMBuildStore(g->e.b, operand(c, g->stash[v], w), stash_at(c, v, j));
        LLVMSetAlignment(st, (unsigned)LLVMABISizeOfType(LLVMGetModuleDataLayout(g->e.mod), et));
    }
    LLVMBuildBr(g->e.b, no);
    LLVMPositionBuilderAtEnd(g->e.b, no);
}

static LLVMValueRef emit_inst(fnc *c, int i, int w)
{
    gen *g = c->g;
    const kir_inst *in = &g->e.k->insts[i];
    int t = in->type;
    if (c->cut && c->cut[i])
        return stash_load(c, i, w);
    switch (in->op) {
    case KIR_LOAD: return emit_load(c, in->a, c->level[i], w);
    case KIR_CONST:
        if (t_fp(t))
            return cg_kfp(&g->e, t, in->imm.f, w);
        return kint(cg_ty_of(&g->e, t), t == KIR_BOOL ? in->imm.u != 0 : in->imm.u, w);
    case KIR_ARG: return scalar_in(g, c->scalars, in->a, t);
    case KIR_INDEX:
        if (c->level[i] < 2)
            return c->idx[in->a];
        if (c->cols && in->a != c->inner)
            return LLVMBuildAdd(g->e.b, splat(g, c->idx[in->a], w), iota(g, w), "");
        if (c->cols)
            return splat(g, c->kin, w);
        return w == 1 ? c->kin : LLVMBuildAdd(g->e.b, splat(g, c->kin, w), iota(g, w), "");
    case KIR_EXTENT: return c->extent[in->a];
    case KIR_ROW_LEN: return c->row_len;
    case KIR_REDUCED: return c->reduced[in->a];
    default: break;
    }
    LLVMValueRef a = operand(c, in->a, w);
    int ta = g->e.k->insts[in->a].type;
    if (kir_n_operands(in->op) == 1)
        return cg_unary(&g->e, in, ta, a, w);
    LLVMValueRef b = operand(c, in->b, w);
    if (in->op >= KIR_EQ && in->op <= KIR_GE)
        return cg_compare(&g->e, in->op, ta, a, b);
    if (kir_n_operands(in->op) == 2)
        return cg_binary(&g->e, in->op, t, a, b, w);
    LLVMValueRef cc = operand(c, in->c, w);
    if (in->op == KIR_SELECT)
        return LLVMBuildSelect(g->e.b, a, b, cc, "");
    LLVMTypeRef ft = LLVMTypeOf(a);
    LLVMValueRef args[3] = {a, b, cc};
    return cg_call_intrinsic(&g->e, "llvm.fma", &ft, 1, args, 3);
}

static void emit_level(fnc *c, int lvl, int w)
{
    for (int i = 0; i < c->g->e.k->n_insts; i++) {
        if (!c->need[i] || c->level[i] != lvl)
            continue;
        LLVMValueRef v = emit_inst(c, i, w);
        if (w == 1)
            c->sv[i] = v;
        else
            c->vv[i] = v;
    }
}

/* ---- Loops ------------------------------------------------------------------------------- */

/* Walks flat positions [pb, pe) of axes [a0, rank) in row-major order, one run along the
 * innermost axis at a time: level-1 values are computed at the start of each run, then
 * body(k0, k1, p0) covers inner positions [k0, k1), the first of which is flat position p0.
 * Without axes to walk (a0 == rank) the domain is one position and k runs over [0, pe - pb). */
static void run_loop(fnc *c, int a0, LLVMValueRef pb, LLVMValueRef pe, body_fn body)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    int rank = g->e.k->rank;
    c->inner = a0 < rank ? rank - 1 : -1;
    LLVMValueRef mem[BURNC_MAX_RANK] = {0};
    for (int d = a0; d < rank; d++)
        mem[d] = entry_alloca(c, g->e.t_i64);
    LLVMValueRef p_mem = entry_alloca(c, g->e.t_i64);
    LLVMBasicBlockRef start = block(c, "walk"), hdr = block(c, "run"), exit = block(c, "walked");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, pb, pe, ""), start, exit);

    LLVMPositionBuilderAtEnd(b, start);
    decompose(c, pb, a0, rank, NULL, mem);
    LLVMBuildStore(b, pb, p_mem);
    LLVMBuildBr(b, hdr);

    LLVMPositionBuilderAtEnd(b, hdr);
    LLVMValueRef pv = LLVMBuildLoad2(b, g->e.t_i64, p_mem, "");
    LLVMValueRef left = LLVMBuildSub(b, pe, pv, "");
    LLVMValueRef k0 = c->inner >= 0 ? LLVMBuildLoad2(b, g->e.t_i64, mem[c->inner], "") : LLVMConstInt(g->e.t_i64, 0, 0);
    LLVMValueRef run = c->inner >= 0 ? umin(g, LLVMBuildSub(b, c->extent[c->inner], k0, ""), left) : left;
    for (int d = a0; d < c->inner; d++)
        c->idx[d] = LLVMBuildLoad2(b, g->e.t_i64, mem[d], "");
    slot_offsets(c, 1);
    emit_level(c, 1, 1);
    LLVMValueRef k1 = LLVMBuildAdd(b, k0, run, "");
    body(c, k0, k1, pv);

    LLVMValueRef pv2 = LLVMBuildAdd(b, pv, run, "");
    LLVMBuildStore(b, pv2, p_mem);
    if (c->inner >= 0) {
        /* The odometer: a finished run carries into the axes above it. */
        LLVMValueRef carry = LLVMBuildICmp(b, LLVMIntEQ, k1, c->extent[c->inner], "");
        LLVMBuildStore(b, LLVMBuildSelect(b, carry, LLVMConstInt(g->e.t_i64, 0, 0), k1, ""), mem[c->inner]);
        for (int d = c->inner - 1; d >= a0; d--) {
            LLVMValueRef v = LLVMBuildLoad2(b, g->e.t_i64, mem[d], "");
            v = LLVMBuildAdd(b, v, LLVMBuildZExt(b, carry, g->e.t_i64, ""), "");
            carry = LLVMBuildICmp(b, LLVMIntEQ, v, c->extent[d], "");
            LLVMBuildStore(b, LLVMBuildSelect(b, carry, LLVMConstInt(g->e.t_i64, 0, 0), v, ""), mem[d]);
        }
    }
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, pv2, pe, ""), hdr, exit);
    LLVMPositionBuilderAtEnd(b, exit);
}

/* Marks the loop whose latch branch is `br` as already vectorized (or not worth it), so the
 * loop vectorizer leaves it alone: without this it would add an 8-wide epilogue copy of the
 * body on top of ours, which costs a third of the compile time and gains nothing. */
static void loop_as_is(gen *g, LLVMValueRef br, bool no_unroll)
{
    LLVMMetadataRef self = LLVMTemporaryMDNode(g->e.ctx, NULL, 0);
    LLVMMetadataRef vec_ops[2] = {md_str(g, "llvm.loop.vectorize.enable"),
                                  LLVMValueAsMetadata(LLVMConstInt(g->e.t_i1, 0, 0))};
    LLVMMetadataRef unroll_ops[1] = {md_str(g, "llvm.loop.unroll.disable")};
    LLVMMetadataRef ops[3] = {self, LLVMMDNodeInContext2(g->e.ctx, vec_ops, 2),
                              LLVMMDNodeInContext2(g->e.ctx, unroll_ops, 1)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(g->e.ctx, ops, no_unroll ? 3 : 2);
    LLVMMetadataReplaceAllUsesWith(self, id);
    LLVMSetMetadata(br, g->md_loop, LLVMMetadataAsValue(g->e.ctx, id));
}

/* A vector store of output `slot` at element `at`: non-temporal when kir_args.stream asks for
 * it and the address is aligned to the vector (up to a cache line), as such stores require;
 * otherwise a plain one. Whole lines written this way skip the read for ownership that a plain
 * store costs. */
static void stream_store_at(fnc *c, int slot, LLVMValueRef x, LLVMValueRef at, int w)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    burnc_dtype_t dt = g->e.k->outputs[slot].dtype;
    LLVMTypeRef mt = cg_mem_ty(&g->e, dt);
    unsigned bytes = (unsigned)w * cg_mem_align(dt), align = bytes < 64 ? bytes : 64;
    LLVMValueRef p = LLVMBuildGEP2(b, mt, c->out_base[slot], &at, 1, "");
    LLVMValueRef asked = LLVMBuildICmp(b, LLVMIntNE,
                                       LLVMBuildAnd(b, c->stream, LLVMConstInt(g->e.t_i32, 1u << slot, 0), ""),
                                       LLVMConstInt(g->e.t_i32, 0, 0), "");
    LLVMValueRef low =
        LLVMBuildAnd(b, LLVMBuildPtrToInt(b, p, g->e.t_i64, ""), LLVMConstInt(g->e.t_i64, align - 1, 0), "");
    LLVMValueRef nt = LLVMBuildAnd(b, asked, LLVMBuildICmp(b, LLVMIntEQ, low, LLVMConstInt(g->e.t_i64, 0, 0), ""), "");
    LLVMBasicBlockRef yes = block(c, "nt_store"), no = block(c, "store"), done = block(c, "stored");
    LLVMBuildCondBr(b, nt, yes, no);
    LLVMPositionBuilderAtEnd(b, yes);
    LLVMValueRef st = LLVMBuildStore(b, x, p);
    LLVMSetAlignment(st, align);
    LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(g->e.t_i32, 1, 0));
    LLVMSetMetadata(st, g->md_nontemporal, LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, &one, 1)));
    tag(g, st, g->store_scope[slot], g->store_noalias[slot]);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, no);
    st = LLVMBuildStore(b, x, p);
    LLVMSetAlignment(st, cg_mem_align(dt));
    tag(g, st, g->store_scope[slot], g->store_noalias[slot]);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
}

/* Non-temporal stores are weakly ordered: a full fence before the function returns makes them
 * visible before the queue reports the job done. Only when something may have streamed. */
static void stream_fence(fnc *c)
{
    gen *g = c->g;
    LLVMBasicBlockRef yes = block(c, "fence"), done = block(c, "fenced");
    LLVMBuildCondBr(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntNE, c->stream, LLVMConstInt(g->e.t_i32, 0, 0), ""), yes, done);
    LLVMPositionBuilderAtEnd(g->e.b, yes);
    LLVMBuildFence(g->e.b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
    LLVMBuildBr(g->e.b, done);
    LLVMPositionBuilderAtEnd(g->e.b, done);
}

static void store_at(fnc *c, int slot, LLVMValueRef x, LLVMValueRef at)
{
    gen *g = c->g;
    burnc_dtype_t dt = g->e.k->outputs[slot].dtype;
    LLVMTypeRef mt = cg_mem_ty(&g->e, dt);
    LLVMValueRef st = LLVMBuildStore(g->e.b, x, LLVMBuildGEP2(g->e.b, mt, c->out_base[slot], &at, 1, ""));
    LLVMSetAlignment(st, cg_mem_align(dt));
    tag(g, st, g->store_scope[slot], g->store_noalias[slot]);
}

/* The stores of this function's kind at inner position k (NULL: no inner axis), w lanes at
 * once: every value was computed before the first store, as in kir_eval. A vector step writes
 * a UNIT slot with one vector store, an ANY slot lane by lane, and a ZERO slot (every position
 * writes the same element) with its last lane, which is what position order leaves there. */
static void emit_stores(fnc *c, LLVMValueRef k, bool row, int w)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *kk = g->e.k;
    bool elementwise = kk->n_outer == kk->rank && kk->n_stages == 0;
    for (int s = 0; s < kk->n_stores; s++) {
        const kir_store *st = &kk->stores[s];
        if (!elementwise && st->row != row)
            continue;
        int slot = st->slot;
        LLVMValueRef v =
            cg_to_mem(&g->e, operand(c, st->value, w), kk->insts[st->value].type, kk->outputs[slot].dtype, w);
        LLVMValueRef off = c->out_off[row ? 0 : 1][slot];
        LLVMValueRef stride = !row && k && c->inner >= 0 ? c->out_stride[slot][c->inner] : NULL;
        if (w > 1 && stride && kk->outputs[slot].stride[c->inner] == KIR_STRIDE_UNIT) {
            stream_store_at(c, slot, v, LLVMBuildAdd(b, off, LLVMBuildMul(b, k, stride, ""), ""), w);
        } else if (w == 1 || (stride && kk->outputs[slot].stride[c->inner] == KIR_STRIDE_UNIT)) {
            store_at(c, slot, v, stride ? LLVMBuildAdd(b, off, LLVMBuildMul(b, k, stride, ""), "") : off);
        } else if (!stride) {
            store_at(c, slot,
                     LLVMBuildExtractElement(b, v, LLVMConstInt(g->e.t_i32, (unsigned long long)(w - 1), 0), ""), off);
        } else {
            for (int lane = 0; lane < w; lane++) {
                LLVMValueRef pos = LLVMBuildAdd(b, k, LLVMConstInt(g->e.t_i64, (unsigned long long)lane, 0), "");
                LLVMValueRef x =
                    LLVMBuildExtractElement(b, v, LLVMConstInt(g->e.t_i32, (unsigned long long)lane, 0), "");
                store_at(c, slot, x, LLVMBuildAdd(b, off, LLVMBuildMul(b, pos, stride, ""), ""));
            }
        }
    }
}

/* A counted loop k over [from, to) (not empty) whose body is element stores of width w. */
static LLVMValueRef store_loop(fnc *c, LLVMValueRef from, LLVMValueRef to, int w)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef k_mem = entry_alloca(c, g->e.t_i64);
    LLVMBuildStore(b, from, k_mem);
    LLVMBasicBlockRef loop = block(c, w > 1 ? "elem_vec" : "elem"), exit = block(c, "elem_done");
    LLVMBuildBr(b, loop);
    LLVMPositionBuilderAtEnd(b, loop);
    LLVMValueRef k = LLVMBuildLoad2(b, g->e.t_i64, k_mem, "");
    c->kin = k;
    if (w > 1)
        memset(c->spl, 0, (size_t)g->e.k->n_insts * sizeof *c->spl);
    emit_level(c, 2, w);
    emit_stores(c, k, false, w);
    LLVMValueRef k2 = LLVMBuildAdd(b, k, LLVMConstInt(g->e.t_i64, (unsigned long long)w, 0), "");
    LLVMBuildStore(b, k2, k_mem);
    LLVMValueRef br = LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, k2, to, ""), loop, exit);
    if (c->inner >= 0)
        loop_as_is(g, br, w == 1);
    LLVMPositionBuilderAtEnd(b, exit);
    return k2;
}

/* The element stores of one run, inner positions [k0, k1): vector steps of elem_width
 * positions, then one position at a time. */
static void body_stores(fnc *c, LLVMValueRef k0, LLVMValueRef k1, LLVMValueRef p0)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    c->jbase = LLVMBuildSub(b, p0, k0, "");
    int w = g->elem_width;
    if (c->inner < 0 || w <= 1) {
        store_loop(c, k0, k1, 1);
        return;
    }
    LLVMValueRef whole =
        LLVMBuildAnd(b, LLVMBuildSub(b, k1, k0, ""), LLVMConstInt(g->e.t_i64, ~(uint64_t)(w - 1), 0), "");
    LLVMValueRef kv_end = LLVMBuildAdd(b, k0, whole, "");
    LLVMValueRef k_mem = entry_alloca(c, g->e.t_i64);
    LLVMBuildStore(b, k0, k_mem);
    LLVMBasicBlockRef vec = block(c, "vec_steps"), tail_check = block(c, "tail_check"), tail = block(c, "tail"),
                      done = block(c, "run_done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, k0, kv_end, ""), vec, tail_check);
    LLVMPositionBuilderAtEnd(b, vec);
    LLVMBuildStore(b, store_loop(c, k0, kv_end, w), k_mem);
    LLVMBuildBr(b, tail_check);
    LLVMPositionBuilderAtEnd(b, tail_check);
    LLVMValueRef kt = LLVMBuildLoad2(b, g->e.t_i64, k_mem, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, kt, k1, ""), tail, done);
    LLVMPositionBuilderAtEnd(b, tail);
    store_loop(c, kt, k1, 1);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
}

/* Prefetches into L2 the inputs of the positions of this step (kin, W lanes) in the next row
 * (the next index of the last outer axis): a stage that computes on a row already in cache
 * overlaps its work with the next row's memory traffic. Prefetches never fault, so the
 * address past the last row is harmless. */
static void prefetch_next_row(fnc *c)
{
    gen *g = c->g;
    const kir_kernel *k = g->e.k;
    LLVMTypeRef pty = g->e.t_ptr;
    for (int s = 0; s < k->n_inputs; s++) {
        LLVMValueRef next = c->in_stride[s][k->n_outer - 1];
        if (k->inputs[s].stride[c->inner] != KIR_STRIDE_UNIT || !next)
            continue;
        bool used = false;
        for (int i = 0; i < k->n_insts && !used; i++)
            used = c->need[i] && k->insts[i].op == KIR_LOAD && k->insts[i].a == s && c->level[i] == 2;
        if (!used)
            continue;
        LLVMTypeRef mt = cg_mem_ty(&g->e, k->inputs[s].dtype);
        int per_line = 64 / (int)cg_mem_align(k->inputs[s].dtype);
        for (int e = 0; e < W; e += per_line) {
            LLVMValueRef off = LLVMBuildAdd(g->e.b, LLVMBuildAdd(g->e.b, c->in_off[1][s], c->kin, ""), next, "");
            off = LLVMBuildAdd(g->e.b, off, LLVMConstInt(g->e.t_i64, (unsigned long long)e, 0), "");
            LLVMValueRef args[4] = {LLVMBuildGEP2(g->e.b, mt, c->in_base[s], &off, 1, ""),
                                    LLVMConstInt(g->e.t_i32, 0, 0), LLVMConstInt(g->e.t_i32, 2, 0),
                                    LLVMConstInt(g->e.t_i32, 1, 0)};
            cg_call_intrinsic(&g->e, "llvm.prefetch", &pty, 1, args, 4);
        }
    }
}

/* One step of a leaf: 32 positions at once when they start lane 0 and lie in this run, else
 * one position into its lane (run ends, rows shorter than a vector). */
static void body_leaf(fnc *c, LLVMValueRef k0, LLVMValueRef k1, LLVMValueRef p0)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    const kir_stage *st = &g->e.k->stages[c->stage];
    int comb = st->combiner, t = g->e.k->insts[st->value].type;
    bool arg = is_arg_comb(comb);
    LLVMTypeRef vt = vty(cg_ty_of(&g->e, t), W), pt = vty(g->e.t_i64, W);
    LLVMValueRef j_mem = entry_alloca(c, g->e.t_i64);
    LLVMBuildStore(b, k0, j_mem);
    LLVMBasicBlockRef hdr = block(c, "step"), pick = block(c, "pick"), vec = block(c, "vec"), sca = block(c, "one"),
                      exit = block(c, "steps_done");
    LLVMBuildBr(b, hdr);

    LLVMPositionBuilderAtEnd(b, hdr);
    LLVMValueRef kk = LLVMBuildLoad2(b, g->e.t_i64, j_mem, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, kk, k1, ""), pick, exit);

    LLVMPositionBuilderAtEnd(b, pick);
    LLVMValueRef pos = LLVMBuildAdd(b, p0, LLVMBuildSub(b, kk, k0, ""), "");
    LLVMValueRef lane = LLVMBuildAnd(b, pos, LLVMConstInt(g->e.t_i64, W - 1, 0), "");
    LLVMValueRef whole =
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, lane, LLVMConstInt(g->e.t_i64, 0, 0), ""),
                     LLVMBuildICmp(b, LLVMIntUGE, LLVMBuildSub(b, k1, kk, ""), LLVMConstInt(g->e.t_i64, W, 0), ""), "");
    LLVMBuildCondBr(b, whole, vec, sca);

    LLVMPositionBuilderAtEnd(b, vec);
    c->kin = kk;
    if (c->prefetch)
        prefetch_next_row(c);
    emit_level(c, 2, W);
    stash_stores(c, pos, W);
    LLVMValueRef v = operand(c, st->value, W), vpos = NULL;
    if (arg)
        vpos = LLVMBuildAdd(b, splat(g, pos, W), iota(g, W), "");
    LLVMValueRef acc = LLVMBuildLoad2(b, vt, c->acc, ""), accp = arg ? LLVMBuildLoad2(b, pt, c->accp, "") : NULL;
    cg_combine(&g->e, comb, t, acc, accp, v, vpos, &acc, &accp);
    LLVMBuildStore(b, acc, c->acc);
    if (arg)
        LLVMBuildStore(b, accp, c->accp);
    LLVMBuildStore(b, LLVMBuildAdd(b, kk, LLVMConstInt(g->e.t_i64, W, 0), ""), j_mem);
    LLVMBuildBr(b, hdr);

    LLVMPositionBuilderAtEnd(b, sca);
    c->kin = kk;
    emit_level(c, 2, 1);
    stash_stores(c, pos, 1);
    LLVMValueRef x = c->sv[st->value];
    LLVMValueRef l32 = LLVMBuildTrunc(b, lane, g->e.t_i32, "");
    LLVMValueRef av = LLVMBuildLoad2(b, vt, c->acc, "");
    LLVMValueRef lv = LLVMBuildExtractElement(b, av, l32, ""), lp = NULL, ap = NULL;
    if (arg) {
        ap = LLVMBuildLoad2(b, pt, c->accp, "");
        lp = LLVMBuildExtractElement(b, ap, l32, "");
    }
    cg_combine(&g->e, comb, t, lv, lp, x, pos, &lv, &lp);
    LLVMBuildStore(b, LLVMBuildInsertElement(b, av, lv, l32, ""), c->acc);
    if (arg)
        LLVMBuildStore(b, LLVMBuildInsertElement(b, ap, lp, l32, ""), c->accp);
    LLVMBuildStore(b, LLVMBuildAdd(b, kk, LLVMConstInt(g->e.t_i64, 1, 0), ""), j_mem);
    LLVMBuildBr(b, hdr);

    LLVMPositionBuilderAtEnd(b, exit);
}

/* ---- The functions ----------------------------------------------------------------------- */

/* Axis levels of a function that walks a row's reduced axes (outer axes fixed by `row`). */
static void row_axis_levels(fnc *c)
{
    const kir_kernel *k = c->g->e.k;
    for (int d = 0; d < k->rank; d++)
        c->axis_level[d] = (int8_t)(d < k->n_outer ? 0 : d == k->rank - 1 ? 2 : 1);
}

/* Entry work shared by the per-row functions: launch values, the outer positions of `row`,
 * the results of earlier stages, level-0 values and offsets. */
static void row_entry(fnc *c, LLVMValueRef args, LLVMValueRef row, LLVMValueRef reduced, int n_reduced)
{
    gen *g = c->g;
    const kir_kernel *k = g->e.k;
    load_launch(c, args);
    decompose(c, row, 0, k->n_outer, c->idx, NULL);
    for (int s = 0; s < n_reduced; s++) {
        int t = is_arg_comb(k->stages[s].combiner) ? KIR_I64 : k->insts[k->stages[s].value].type;
        c->reduced[s] = scalar_in(g, reduced, s, t);
    }
    slot_offsets(c, 0);
    emit_level(c, 0, 1);
}

static int stage_type(const kir_kernel *k, int s) { return k->insts[k->stages[s].value].type; }

/* leaf_s(args, row, leaf, reduced, out_value, out_pos): one leaf of stage s of a row. */
static void build_leaf_fn(gen *g, int s)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    char name[32];
    snprintf(name, sizeof name, "burnc_leaf%d", s);
    g->leaf_fn[s] = fn_begin(g, &c, name, g->leaf_ty, true);
    if (!fn_ok(&c))
        goto done;
    c.stage = s;
    if (s == k->n_stages - 1 && g->n_stash)
        c.stash = LLVMGetParam(c.fn, 6);
    c.prefetch = s > 0 && s == k->n_stages - 1 && k->n_outer > 0;
    row_axis_levels(&c);
    analyze(&c, &k->stages[s].value, 1); /* the stashed values are among what it needs */
    LLVMValueRef args = LLVMGetParam(c.fn, 0), row = LLVMGetParam(c.fn, 1), leaf = LLVMGetParam(c.fn, 2);
    row_entry(&c, args, row, LLVMGetParam(c.fn, 3), s);

    int comb = k->stages[s].combiner, t = stage_type(k, s);
    c.acc = entry_alloca(&c, vty(cg_ty_of(&g->e, t), W));
    LLVMBuildStore(g->e.b, cg_identity(&g->e, comb, t, W), c.acc);
    if (is_arg_comb(comb)) {
        c.accp = entry_alloca(&c, vty(g->e.t_i64, W));
        LLVMBuildStore(g->e.b, kint(g->e.t_i64, INT64_MAX, W), c.accp);
    }
    LLVMValueRef lb = LLVMBuildShl(g->e.b, leaf, LLVMConstInt(g->e.t_i64, LEAF_SHIFT, 0), "");
    LLVMValueRef le = umin(g, LLVMBuildAdd(g->e.b, lb, LLVMConstInt(g->e.t_i64, KIR_LEAF, 0), ""), c.row_len);
    run_loop(&c, k->n_outer, lb, le, body_leaf);

    LLVMValueRef v = LLVMBuildLoad2(g->e.b, vty(cg_ty_of(&g->e, t), W), c.acc, ""), p = NULL;
    if (c.accp)
        p = LLVMBuildLoad2(g->e.b, vty(g->e.t_i64, W), c.accp, "");
    lane_tree(g, comb, t, &v, &p);
    LLVMBuildStore(g->e.b, v, LLVMGetParam(c.fn, 4));
    if (p)
        LLVMBuildStore(g->e.b, p, LLVMGetParam(c.fn, 5));
    LLVMBuildRetVoid(g->e.b);
done:
    fn_end(&c);
}

static int collect_stores(const kir_kernel *k, bool row, bool any, int32_t *roots)
{
    int n = 0;
    for (int s = 0; s < k->n_stores; s++)
        if (any || k->stores[s].row == row)
            roots[n++] = k->stores[s].value;
    return n;
}

/* elem(args, row, reduced, stash): the element stores of a row, over its reduced positions;
 * with a stash, one walk that reads the stashed values and one that computes them. */
static void build_elem_fn(gen *g)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    uint8_t *cut = NULL;
    g->elem_fn = fn_begin(g, &c, "burnc_elem", g->elem_ty, true);
    if (!fn_ok(&c))
        goto done;
    row_axis_levels(&c);
    int32_t roots[KIR_MAX_OUTPUTS];
    int n_roots = collect_stores(k, false, false, roots);
    analyze(&c, roots, n_roots);
    row_entry(&c, LLVMGetParam(c.fn, 0), LLVMGetParam(c.fn, 1), LLVMGetParam(c.fn, 2), k->n_stages);
    LLVMValueRef zero = LLVMConstInt(g->e.t_i64, 0, 0);
    if (g->n_stash && (cut = calloc((size_t)k->n_insts, 1))) {
        LLVMValueRef stash = LLVMGetParam(c.fn, 3);
        LLVMBasicBlockRef with = block(&c, "with_stash"), without = block(&c, "without_stash");
        LLVMBuildCondBr(g->e.b, LLVMBuildIsNotNull(g->e.b, stash, ""), with, without);
        LLVMPositionBuilderAtEnd(g->e.b, with);
        uint8_t *plain = c.need;
        c.need = calloc((size_t)k->n_insts, 1);
        for (int v = 0; v < g->n_stash; v++)
            cut[g->stash[v]] = 1;
        if (c.need) {
            mark_needed(k, roots, n_roots, cut, c.need);
            c.cut = cut;
            c.stash = stash;
            run_loop(&c, k->n_outer, zero, c.row_len, body_stores);
            c.cut = NULL;
            free(c.need);
        }
        LLVMBuildRetVoid(g->e.b);
        c.need = plain;
        LLVMPositionBuilderAtEnd(g->e.b, without);
    }
    run_loop(&c, k->n_outer, zero, c.row_len, body_stores);
    LLVMBuildRetVoid(g->e.b);
done:
    free(cut);
    fn_end(&c);
}

/* finish(args, row, stage_results): the row stores, reduced coordinates 0. */
static void build_finish(gen *g)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    g->finish_fn = fn_begin(g, &c, CG_SYM_FINISH, g->finish_ty, false);
    if (!fn_ok(&c))
        goto done;
    c.row_outputs = true;
    int32_t roots[KIR_MAX_OUTPUTS];
    analyze(&c, roots, collect_stores(k, true, false, roots));
    for (int d = k->n_outer; d < k->rank; d++)
        c.idx[d] = LLVMConstInt(g->e.t_i64, 0, 0);
    row_entry(&c, LLVMGetParam(c.fn, 0), LLVMGetParam(c.fn, 1), LLVMGetParam(c.fn, 2), k->n_stages);
    emit_stores(&c, NULL, true, 1);
    LLVMBuildRetVoid(g->e.b);
done:
    fn_end(&c);
}

/* [begin, end) cut to the rows that exist (axes [0, axes) count them): a range outside the
 * domain does nothing instead of dividing by a zero extent. */
static void clamp_rows(fnc *c, int axes, LLVMValueRef *begin, LLVMValueRef *end)
{
    gen *g = c->g;
    LLVMValueRef n = LLVMConstInt(g->e.t_i64, 1, 0), zero = LLVMConstInt(g->e.t_i64, 0, 0);
    for (int d = 0; d < axes; d++)
        n = LLVMBuildMul(g->e.b, n, c->extent[d], "");
    *begin = LLVMBuildSelect(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntSLT, *begin, zero, ""), zero, *begin, "");
    *end = LLVMBuildSelect(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntSLT, n, *end, ""), n, *end, "");
}

/* rows(args, begin, end) of an element-wise kernel: one walk over the whole domain. */
static void build_rows_elementwise(gen *g)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    LLVMTypeRef params[3] = {g->e.t_ptr, g->e.t_i64, g->e.t_i64};
    fn_begin(g, &c, CG_SYM_ROWS, LLVMFunctionType(g->e.t_void, params, 3, 0), false);
    if (!fn_ok(&c))
        goto done;
    for (int d = 0; d < k->rank; d++)
        c.axis_level[d] = (int8_t)(d == k->rank - 1 ? 2 : 1);
    int32_t roots[KIR_MAX_OUTPUTS];
    analyze(&c, roots, collect_stores(k, false, true, roots));
    load_launch(&c, LLVMGetParam(c.fn, 0));
    LLVMValueRef begin = LLVMGetParam(c.fn, 1), end = LLVMGetParam(c.fn, 2);
    clamp_rows(&c, k->rank, &begin, &end);
    slot_offsets(&c, 0);
    emit_level(&c, 0, 1);
    run_loop(&c, 0, begin, end, body_stores);
    stream_fence(&c);
    LLVMBuildRetVoid(g->e.b);
done:
    fn_end(&c);
}

/* A counted loop i in [from, to) around the code that `step` emits; returns i's value inside
 * and leaves the builder in the body. Close with loop_close. */
typedef struct loop_ctl {
    LLVMValueRef mem, i, to;
    LLVMBasicBlockRef hdr, body, exit;
} loop_ctl;

static LLVMValueRef loop_open(fnc *c, loop_ctl *l, LLVMValueRef from, LLVMValueRef to)
{
    gen *g = c->g;
    l->mem = entry_alloca(c, g->e.t_i64);
    l->to = to;
    LLVMBuildStore(g->e.b, from, l->mem);
    l->hdr = block(c, "for");
    l->body = block(c, "for_body");
    l->exit = block(c, "for_done");
    LLVMBuildBr(g->e.b, l->hdr);
    LLVMPositionBuilderAtEnd(g->e.b, l->hdr);
    l->i = LLVMBuildLoad2(g->e.b, g->e.t_i64, l->mem, "");
    LLVMBuildCondBr(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntSLT, l->i, to, ""), l->body, l->exit);
    LLVMPositionBuilderAtEnd(g->e.b, l->body);
    return l->i;
}

static void loop_close(fnc *c, loop_ctl *l)
{
    gen *g = c->g;
    LLVMBuildStore(g->e.b, LLVMBuildAdd(g->e.b, l->i, LLVMConstInt(g->e.t_i64, 1, 0), ""), l->mem);
    LLVMBuildBr(g->e.b, l->hdr);
    LLVMPositionBuilderAtEnd(g->e.b, l->exit);
}

static LLVMValueRef gep1(gen *g, LLVMTypeRef t, LLVMValueRef base, LLVMValueRef i)
{
    return LLVMBuildGEP2(g->e.b, t, base, &i, 1, "");
}

/* ---- Columns -----------------------------------------------------------------------------
 * A reduction over an axis that is not contiguous in memory (a sum over the batch axis) would
 * gather its 32 positions one element per row. When the stages' inputs are contiguous along
 * the last outer axis instead, the rows function also runs COLS adjacent rows at once: every
 * value is a vector over those rows, and each of the 32 accumulator lanes of kernel.h becomes a
 * vector of COLS row accumulators (acc[lane][row]), kept in a small array indexed by the
 * position's lane. Each row's values still meet its accumulators in increasing position order
 * from the identity, and the lane and leaf trees run element-wise on those vectors, so every
 * row gets the same bits as alone. Rows that do not fill a group run one by one. */

/* Entry work of a function over COLS rows from param 1 (args: param 0; the rows' earlier stage
 * results: `red`): the results of stages [0, n_reduced) as vectors over the rows. */
static void cols_entry(fnc *c, LLVMValueRef red, int n_reduced)
{
    gen *g = c->g;
    const kir_kernel *k = g->e.k;
    c->cols = true;
    load_launch(c, LLVMGetParam(c->fn, 0));
    decompose(c, LLVMGetParam(c->fn, 1), 0, k->n_outer, c->idx, NULL);
    for (int r = 0; r < n_reduced; r++) {
        int tr = is_arg_comb(k->stages[r].combiner) ? KIR_I64 : stage_type(k, r);
        LLVMValueRef v = LLVMGetPoison(vty(cg_ty_of(&g->e, tr), COLS));
        for (int i = 0; i < COLS; i++)
            v = LLVMBuildInsertElement(g->e.b, v, scalar_in(g, red, (int64_t)i * KIR_MAX_STAGES + r, tr),
                                       LLVMConstInt(g->e.t_i32, (unsigned long long)i, 0), "");
        c->reduced[r] = v;
    }
    slot_offsets(c, 0);
    emit_level(c, 0, 1);
}

/* The element stores at reduced position kin of COLS rows: one vector store where the output is
 * contiguous along the rows, else lane by lane in row order (what the rows one by one leave). */
static void body_cols_stores(fnc *c, LLVMValueRef k0, LLVMValueRef k1, LLVMValueRef p0)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *k = g->e.k;
    int o = k->n_outer - 1;
    (void)p0;
    loop_ctl l;
    c->kin = loop_open(c, &l, k0, k1);
    memset(c->spl, 0, (size_t)k->n_insts * sizeof *c->spl);
    emit_level(c, 2, COLS);
    for (int s = 0; s < k->n_stores; s++) {
        const kir_store *st = &k->stores[s];
        if (st->row)
            continue;
        int slot = st->slot;
        LLVMValueRef v = cg_to_mem(&g->e, operand(c, st->value, COLS), k->insts[st->value].type,
                                   k->outputs[slot].dtype, COLS);
        LLVMValueRef off = c->out_off[1][slot], si = c->out_stride[slot][c->inner], so = c->out_stride[slot][o];
        if (si)
            off = LLVMBuildAdd(b, off, LLVMBuildMul(b, c->kin, si, ""), "");
        if (so)
            off = LLVMBuildAdd(b, off, LLVMBuildMul(b, c->idx[o], so, ""), "");
        if (k->outputs[slot].stride[o] == KIR_STRIDE_UNIT) {
            store_at(c, slot, v, off);
            continue;
        }
        for (int lane = 0; lane < COLS; lane++) {
            LLVMValueRef li = LLVMConstInt(g->e.t_i64, (unsigned long long)lane, 0);
            LLVMValueRef at = so ? LLVMBuildAdd(b, off, LLVMBuildMul(b, li, so, ""), "") : off;
            store_at(c, slot, LLVMBuildExtractElement(b, v, LLVMBuildTrunc(b, li, g->e.t_i32, ""), ""), at);
        }
    }
    loop_close(c, &l);
}

/* cols_elem(args, row, reduced, stash): the element stores of COLS rows from `row`. */
static void build_cols_elem_fn(gen *g)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    g->cols_elem_fn = fn_begin(g, &c, "burnc_cols_elem", g->elem_ty, true);
    if (!fn_ok(&c))
        goto done;
    c.cols = true;
    row_axis_levels(&c);
    c.axis_level[k->n_outer - 1] = 2;
    int32_t roots[KIR_MAX_OUTPUTS];
    analyze(&c, roots, collect_stores(k, false, false, roots));
    cols_entry(&c, LLVMGetParam(c.fn, 2), k->n_stages);
    run_loop(&c, k->n_outer, LLVMConstInt(g->e.t_i64, 0, 0), c.row_len, body_cols_stores);
    LLVMBuildRetVoid(g->e.b);
done:
    fn_end(&c);
}

/* Prefetches the rows' inputs COLS_AHEAD reduced positions ahead: each position's vector lies
 * a row length away from the last, a stride the hardware prefetchers do not follow. Prefetches
 * never fault, so addresses past the end are harmless. */
enum { COLS_AHEAD = 16 };
static void prefetch_cols(fnc *c)
{
    gen *g = c->g;
    const kir_kernel *k = g->e.k;
    LLVMBuilderRef b = g->e.b;
    LLVMTypeRef pty = g->e.t_ptr;
    int o = k->n_outer - 1;
    for (int s = 0; s < k->n_inputs; s++) {
        LLVMValueRef si = c->in_stride[s][c->inner];
        if (k->inputs[s].stride[o] != KIR_STRIDE_UNIT || !si)
            continue;
        bool used = false;
        for (int i = 0; i < k->n_insts && !used; i++)
            used = c->need[i] && k->insts[i].op == KIR_LOAD && k->insts[i].a == s && c->level[i] == 2;
        if (!used)
            continue;
        LLVMTypeRef mt = cg_mem_ty(&g->e, k->inputs[s].dtype);
        LLVMValueRef ahead = LLVMBuildAdd(b, c->kin, LLVMConstInt(g->e.t_i64, COLS_AHEAD, 0), "");
        LLVMValueRef off = LLVMBuildAdd(b, c->in_off[1][s], LLVMBuildMul(b, ahead, si, ""), "");
        off = LLVMBuildAdd(b, off, c->idx[o], "");
        int per_line = 64 / (int)cg_mem_align(k->inputs[s].dtype);
        for (int e = 0; e < COLS; e += per_line) {
            LLVMValueRef at = LLVMBuildAdd(b, off, LLVMConstInt(g->e.t_i64, (unsigned long long)e, 0), "");
            LLVMValueRef args[4] = {LLVMBuildGEP2(b, mt, c->in_base[s], &at, 1, ""), LLVMConstInt(g->e.t_i32, 0, 0),
                                    LLVMConstInt(g->e.t_i32, 3, 0), LLVMConstInt(g->e.t_i32, 1, 0)};
            cg_call_intrinsic(&g->e, "llvm.prefetch", &pty, 1, args, 4);
        }
    }
}

/* One reduced position of a leaf, run [k0, k1) from flat position p0, for COLS rows. */
static void body_cols(fnc *c, LLVMValueRef k0, LLVMValueRef k1, LLVMValueRef p0)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    const kir_stage *st = &g->e.k->stages[c->stage];
    int comb = st->combiner, t = g->e.k->insts[st->value].type;
    LLVMTypeRef vt = vty(cg_ty_of(&g->e, t), COLS), pt = vty(g->e.t_i64, COLS);
    loop_ctl l;
    LLVMValueRef kk = loop_open(c, &l, k0, k1);
    LLVMValueRef pos = LLVMBuildAdd(b, p0, LLVMBuildSub(b, kk, k0, ""), "");
    LLVMValueRef lane = LLVMBuildAnd(b, pos, LLVMConstInt(g->e.t_i64, W - 1, 0), "");
    c->kin = kk;
    prefetch_cols(c);
    memset(c->spl, 0, (size_t)g->e.k->n_insts * sizeof *c->spl);
    emit_level(c, 2, COLS);
    LLVMValueRef v = operand(c, st->value, COLS);
    LLVMValueRef ap = gep1(g, vt, c->acc, lane), pp = NULL, acc = LLVMBuildLoad2(b, vt, ap, ""), accp = NULL;
    if (is_arg_comb(comb)) {
        pp = gep1(g, pt, c->accp, lane);
        accp = LLVMBuildLoad2(b, pt, pp, "");
    }
    cg_combine(&g->e, comb, t, acc, accp, v, pp ? splat(g, pos, COLS) : NULL, &acc, &accp);
    LLVMBuildStore(b, acc, ap);
    if (pp)
        LLVMBuildStore(b, accp, pp);
    loop_close(c, &l);
}

/* cols_s(args, row, leaf, reduced, out_value, out_pos): leaf `leaf` of stage s for rows
 * row .. row + COLS - 1 (one run of the last outer axis); reduced holds their earlier stage
 * results, KIR_MAX_STAGES per row; the outputs are vectors over the rows. */
static void build_cols_fn(gen *g, int s)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    char name[32];
    snprintf(name, sizeof name, "burnc_cols%d", s);
    g->cols_fn[s] = fn_begin(g, &c, name, g->leaf_ty, true);
    if (!fn_ok(&c))
        goto done;
    LLVMBuilderRef b = g->e.b;
    int o = k->n_outer - 1, comb = k->stages[s].combiner, t = stage_type(k, s);
    c.stage = s;
    c.cols = true;
    row_axis_levels(&c);
    c.axis_level[o] = 2;
    analyze(&c, &k->stages[s].value, 1);
    LLVMValueRef leaf = LLVMGetParam(c.fn, 2);
    cols_entry(&c, LLVMGetParam(c.fn, 3), s);

    bool arg = is_arg_comb(comb);
    LLVMTypeRef vt = vty(cg_ty_of(&g->e, t), COLS), pt = vty(g->e.t_i64, COLS);
    c.acc = entry_alloca(&c, LLVMArrayType(vt, W));
    c.accp = arg ? entry_alloca(&c, LLVMArrayType(pt, W)) : NULL;
    for (int i = 0; i < W; i++) {
        LLVMValueRef li = LLVMConstInt(g->e.t_i64, (unsigned long long)i, 0);
        LLVMBuildStore(b, cg_identity(&g->e, comb, t, COLS), gep1(g, vt, c.acc, li));
        if (arg)
            LLVMBuildStore(b, kint(g->e.t_i64, INT64_MAX, COLS), gep1(g, pt, c.accp, li));
    }
    LLVMValueRef lb = LLVMBuildShl(b, leaf, LLVMConstInt(g->e.t_i64, LEAF_SHIFT, 0), "");
    LLVMValueRef le = umin(g, LLVMBuildAdd(b, lb, LLVMConstInt(g->e.t_i64, KIR_LEAF, 0), ""), c.row_len);
    run_loop(&c, k->n_outer, lb, le, body_cols);

    /* kernel.h's lane tree, lane 2i with 2i+1, on whole row vectors. */
    LLVMValueRef v[W], p[W] = {0};
    for (int i = 0; i < W; i++) {
        LLVMValueRef li = LLVMConstInt(g->e.t_i64, (unsigned long long)i, 0);
        v[i] = LLVMBuildLoad2(b, vt, gep1(g, vt, c.acc, li), "");
        if (arg)
            p[i] = LLVMBuildLoad2(b, pt, gep1(g, pt, c.accp, li), "");
    }
    for (int n = W; n > 1; n /= 2)
        for (int i = 0; i < n / 2; i++)
            cg_combine(&g->e, comb, t, v[2 * i], p[2 * i], v[2 * i + 1], p[2 * i + 1], &v[i], &p[i]);
    LLVMBuildStore(b, v[0], LLVMGetParam(c.fn, 4));
    if (arg)
        LLVMBuildStore(b, p[0], LLVMGetParam(c.fn, 5));
    LLVMBuildRetVoid(b);
done:
    fn_end(&c);
}

/* Whether the stages would gather fewer of their loads across rows than along them: a load
 * strided along the inner reduced axis is a gather per row, one strided along the last outer
 * axis a gather per group of rows (UNIT or ZERO there is a vector or one scalar). */
static bool choose_cols(const kir_kernel *k)
{
    if (k->n_stages == 0 || k->n_outer == 0 || k->n_outer == k->rank || k->n_insts == 0)
        return false;
    uint8_t *need = calloc((size_t)k->n_insts, 1);
    if (!need)
        return false;
    int32_t roots[KIR_MAX_STAGES];
    for (int s = 0; s < k->n_stages; s++)
        roots[s] = k->stages[s].value;
    mark_needed(k, roots, k->n_stages, NULL, need);
    int o = k->n_outer - 1, inner = k->rank - 1, row_gathers = 0, col_gathers = 0;
    for (int i = 0; i < k->n_insts; i++) {
        if (!need[i] || k->insts[i].op != KIR_LOAD)
            continue;
        const uint8_t *st = k->inputs[k->insts[i].a].stride;
        row_gathers += st[inner] == KIR_STRIDE_ANY;
        col_gathers += st[o] == KIR_STRIDE_ANY;
    }
    free(need);
    return row_gathers > col_gathers;
}

/* Stage s of `row` into reduced[s]: the leaves in order, combined by the pairwise tree with
 * an explicit stack (push each leaf, merge while the count of leaves so far is even: the same
 * tree as kernel.h's level-by-level one, odd last elements carried up). With w == COLS, of the
 * COLS rows from `row` at once (reduced: KIR_MAX_STAGES results per row), element-wise. */
static void emit_stage(fnc *c, int s, LLVMValueRef args, LLVMValueRef row, LLVMValueRef reduced, LLVMValueRef stash,
                       int w)
{
    gen *g = c->g;
    LLVMBuilderRef b = g->e.b;
    const kir_kernel *k = g->e.k;
    int comb = k->stages[s].combiner, t = stage_type(k, s);
    bool arg = is_arg_comb(comb);
    LLVMTypeRef et = vty(cg_ty_of(&g->e, t), w), pt = vty(g->e.t_i64, w);
    LLVMValueRef sv = entry_alloca(c, LLVMArrayType(et, STACK_DEPTH));
    LLVMValueRef sp_pos = entry_alloca(c, LLVMArrayType(pt, STACK_DEPTH));
    LLVMValueRef sp = entry_alloca(c, g->e.t_i64), rv = entry_alloca(c, et), rp = entry_alloca(c, pt);
    LLVMValueRef tv = entry_alloca(c, et), tp = entry_alloca(c, pt), tmem = entry_alloca(c, g->e.t_i64);
    LLVMValueRef one = LLVMConstInt(g->e.t_i64, 1, 0), two = LLVMConstInt(g->e.t_i64, 2, 0);
    LLVMBuildStore(b, LLVMConstInt(g->e.t_i64, 0, 0), sp);
    LLVMBuildStore(b, cg_identity(&g->e, comb, t, w), rv);
    LLVMBuildStore(b, kint(g->e.t_i64, INT64_MAX, w), rp);
    LLVMValueRef n_leaves = LLVMBuildLShr(b, LLVMBuildAdd(b, c->row_len, LLVMConstInt(g->e.t_i64, KIR_LEAF - 1, 0), ""),
                                          LLVMConstInt(g->e.t_i64, LEAF_SHIFT, 0), "");

    loop_ctl leaves;
    LLVMValueRef leaf = loop_open(c, &leaves, LLVMConstInt(g->e.t_i64, 0, 0), n_leaves);
    LLVMValueRef cargs[7] = {args, row, leaf, reduced, tv, tp, stash};
    LLVMBuildCall2(b, g->leaf_ty, w > 1 ? g->cols_fn[s] : g->leaf_fn[s], cargs, 7, "");
    LLVMValueRef top = LLVMBuildLoad2(b, g->e.t_i64, sp, "");
    LLVMBuildStore(b, LLVMBuildLoad2(b, et, tv, ""), gep1(g, et, sv, top));
    LLVMBuildStore(b, LLVMBuildLoad2(b, pt, tp, ""), gep1(g, pt, sp_pos, top));
    LLVMBuildStore(b, LLVMBuildAdd(b, top, one, ""), sp);
    LLVMBuildStore(b, LLVMBuildAdd(b, leaf, one, ""), tmem);
    LLVMBasicBlockRef mh = block(c, "merge"), mb = block(c, "merge_body"), me = block(c, "merge_done");
    LLVMBuildBr(b, mh);
    LLVMPositionBuilderAtEnd(b, mh);
    LLVMValueRef cnt = LLVMBuildLoad2(b, g->e.t_i64, tmem, "");
    LLVMValueRef even = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, cnt, one, ""), LLVMConstInt(g->e.t_i64, 0, 0), "");
    LLVMBuildCondBr(b, even, mb, me);
    LLVMPositionBuilderAtEnd(b, mb);
    {
        LLVMValueRef h = LLVMBuildLoad2(b, g->e.t_i64, sp, "");
        LLVMValueRef li = LLVMBuildSub(b, h, two, ""), ri = LLVMBuildSub(b, h, one, "");
        LLVMValueRef lvp = gep1(g, et, sv, li), lpp = gep1(g, pt, sp_pos, li);
        LLVMValueRef lv = LLVMBuildLoad2(b, et, lvp, ""), rvv = LLVMBuildLoad2(b, et, gep1(g, et, sv, ri), "");
        LLVMValueRef lp = LLVMBuildLoad2(b, pt, lpp, "");
        LLVMValueRef rpp = LLVMBuildLoad2(b, pt, gep1(g, pt, sp_pos, ri), "");
        cg_combine(&g->e, comb, t, lv, lp, rvv, rpp, &lv, &lp);
        LLVMBuildStore(b, lv, lvp);
        if (arg)
            LLVMBuildStore(b, lp, lpp);
        LLVMBuildStore(b, ri, sp);
        LLVMBuildStore(b, LLVMBuildLShr(b, cnt, one, ""), tmem);
        LLVMBuildBr(b, mh);
    }
    LLVMPositionBuilderAtEnd(b, me);
    loop_close(c, &leaves);

    /* Fold what is left on the stack, from the top: later leaves are the right operand. */
    LLVMBasicBlockRef fold = block(c, "fold"), fh = block(c, "fold_hdr"), fb = block(c, "fold_body"),
                      fe = block(c, "fold_done");
    LLVMValueRef h0 = LLVMBuildLoad2(b, g->e.t_i64, sp, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, h0, LLVMConstInt(g->e.t_i64, 0, 0), ""), fold, fe);
    LLVMPositionBuilderAtEnd(b, fold);
    LLVMValueRef ti = LLVMBuildSub(b, h0, one, "");
    LLVMBuildStore(b, LLVMBuildLoad2(b, et, gep1(g, et, sv, ti), ""), rv);
    LLVMBuildStore(b, LLVMBuildLoad2(b, pt, gep1(g, pt, sp_pos, ti), ""), rp);
    LLVMBuildStore(b, ti, tmem);
    LLVMBuildBr(b, fh);
    LLVMPositionBuilderAtEnd(b, fh);
    LLVMValueRef j = LLVMBuildSub(b, LLVMBuildLoad2(b, g->e.t_i64, tmem, ""), one, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGE, j, LLVMConstInt(g->e.t_i64, 0, 0), ""), fb, fe);
    LLVMPositionBuilderAtEnd(b, fb);
    {
        LLVMValueRef lv = LLVMBuildLoad2(b, et, gep1(g, et, sv, j), "");
        LLVMValueRef lp = LLVMBuildLoad2(b, pt, gep1(g, pt, sp_pos, j), "");
        LLVMValueRef r_v = LLVMBuildLoad2(b, et, rv, ""), r_p = LLVMBuildLoad2(b, pt, rp, "");
        cg_combine(&g->e, comb, t, lv, lp, r_v, r_p, &lv, &lp);
        LLVMBuildStore(b, lv, rv);
        if (arg)
            LLVMBuildStore(b, lp, rp);
        LLVMBuildStore(b, j, tmem);
        LLVMBuildBr(b, fh);
    }
    LLVMPositionBuilderAtEnd(b, fe);
    LLVMValueRef res = LLVMBuildLoad2(b, arg ? pt : et, arg ? rp : rv, "");
    if (arg) /* no position (an empty row): 0 */
        res = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, res, kint(g->e.t_i64, INT64_MAX, w), ""),
                              kint(g->e.t_i64, 0, w), res, "");
    for (int i = 0; i < w; i++) {
        LLVMValueRef x = w > 1 ? LLVMBuildExtractElement(b, res, LLVMConstInt(g->e.t_i32, (unsigned long long)i, 0), "")
                               : res;
        LLVMValueRef at = LLVMConstInt(g->e.t_i64, (unsigned long long)i * KIR_MAX_STAGES + (unsigned long long)s, 0);
        scalar_out(g, x, arg ? KIR_I64 : t, gep1(g, g->e.t_i64, reduced, at));
    }
}

/* What follows a row's stages: its element stores (rows with positions only), its row stores. */
static void row_tail(fnc *c, LLVMValueRef args, LLVMValueRef row, LLVMValueRef reduced, LLVMValueRef stash)
{
    gen *g = c->g;
    LLVMValueRef cargs[4] = {args, row, reduced, stash};
    if (g->has_elem) {
        LLVMBasicBlockRef yes = block(c, "elems"), no = block(c, "elems_done");
        LLVMBuildCondBr(g->e.b, LLVMBuildICmp(g->e.b, LLVMIntSGT, c->row_len, LLVMConstInt(g->e.t_i64, 0, 0), ""), yes,
                        no);
        LLVMPositionBuilderAtEnd(g->e.b, yes);
        LLVMBuildCall2(g->e.b, g->elem_ty, g->elem_fn, cargs, 4, "");
        LLVMBuildBr(g->e.b, no);
        LLVMPositionBuilderAtEnd(g->e.b, no);
    }
    if (g->has_row)
        LLVMBuildCall2(g->e.b, g->finish_ty, g->finish_fn, cargs, 3, "");
}

/* rows(args, begin, end) of a kernel with reduced axes or stages: per row (or group of COLS
 * rows, see "Columns"), the stages, then row_tail. */
static void build_rows_reduce(gen *g)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    LLVMTypeRef params[3] = {g->e.t_ptr, g->e.t_i64, g->e.t_i64};
    fn_begin(g, &c, CG_SYM_ROWS, LLVMFunctionType(g->e.t_void, params, 3, 0), false);
    if (!fn_ok(&c))
        goto done;
    LLVMValueRef args = LLVMGetParam(c.fn, 0);
    load_launch(&c, args);
    LLVMValueRef reduced = entry_alloca(&c, LLVMArrayType(g->e.t_i64, KIR_MAX_STAGES));
    LLVMValueRef begin = LLVMGetParam(c.fn, 1), end = LLVMGetParam(c.fn, 2);
    clamp_rows(&c, k->n_outer, &begin, &end);
    LLVMValueRef null = LLVMConstNull(g->e.t_ptr), stash = null;
    if (g->n_stash) {
        LLVMValueRef buf = entry_alloca(&c, LLVMArrayType(g->e.t_i64, (unsigned)(g->n_stash * STASH_MAX)));
        LLVMSetAlignment(buf, 64);
        LLVMValueRef fits = LLVMBuildICmp(g->e.b, LLVMIntULE, c.row_len, LLVMConstInt(g->e.t_i64, STASH_MAX, 0), "");
        stash = LLVMBuildSelect(g->e.b, fits, buf, null, "");
    }
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef r_mem = entry_alloca(&c, g->e.t_i64);
    LLVMBuildStore(b, begin, r_mem);
    LLVMBasicBlockRef hdr = block(&c, "row"), one = block(&c, "one_row"), exit = block(&c, "rows_done");
    LLVMBuildBr(b, hdr);
    LLVMPositionBuilderAtEnd(b, hdr);
    LLVMValueRef row = LLVMBuildLoad2(b, g->e.t_i64, r_mem, "");
    LLVMBasicBlockRef more = block(&c, "rows_left");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, row, end, ""), more, exit);
    LLVMPositionBuilderAtEnd(b, more);
    if (g->cols) {
        /* COLS rows at once when they lie in one run of the last outer axis and in range. */
        LLVMValueRef ncols = LLVMConstInt(g->e.t_i64, COLS, 0), ext = c.extent[k->n_outer - 1];
        LLVMValueRef in_run = LLVMBuildICmp(b, LLVMIntULE, LLVMBuildAdd(b, LLVMBuildURem(b, row, ext, ""), ncols, ""),
                                            ext, "");
        LLVMValueRef in_range = LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, row, ncols, ""), end, "");
        LLVMBasicBlockRef group = block(&c, "row_group");
        LLVMBuildCondBr(b, LLVMBuildAnd(b, in_run, in_range, ""), group, one);
        LLVMPositionBuilderAtEnd(b, group);
        LLVMValueRef greduced = entry_alloca(&c, LLVMArrayType(g->e.t_i64, COLS * KIR_MAX_STAGES));
        for (int s = 0; s < k->n_stages; s++)
            emit_stage(&c, s, args, row, greduced, null, COLS);
        if (g->has_elem) {
            LLVMValueRef cargs[4] = {args, row, greduced, null};
            LLVMBasicBlockRef yes = block(&c, "col_elems"), no = block(&c, "col_elems_done");
            LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, c.row_len, LLVMConstInt(g->e.t_i64, 0, 0), ""), yes, no);
            LLVMPositionBuilderAtEnd(b, yes);
            LLVMBuildCall2(b, g->elem_ty, g->cols_elem_fn, cargs, 4, "");
            LLVMBuildBr(b, no);
            LLVMPositionBuilderAtEnd(b, no);
        }
        if (g->has_row) {
            loop_ctl each;
            LLVMValueRef i = loop_open(&c, &each, LLVMConstInt(g->e.t_i64, 0, 0), ncols);
            LLVMValueRef at = LLVMBuildMul(b, i, LLVMConstInt(g->e.t_i64, KIR_MAX_STAGES, 0), "");
            LLVMValueRef cargs[3] = {args, LLVMBuildAdd(b, row, i, ""), gep1(g, g->e.t_i64, greduced, at)};
            LLVMBuildCall2(b, g->finish_ty, g->finish_fn, cargs, 3, "");
            loop_close(&c, &each);
        }
        LLVMBuildStore(b, LLVMBuildAdd(b, row, ncols, ""), r_mem);
        LLVMBuildBr(b, hdr);
    } else {
        LLVMBuildBr(b, one);
    }
    LLVMPositionBuilderAtEnd(b, one);
    for (int s = 0; s < k->n_stages; s++)
        emit_stage(&c, s, args, row, reduced, s == k->n_stages - 1 ? stash : null, 1);
    row_tail(&c, args, row, reduced, stash);
    LLVMBuildStore(b, LLVMBuildAdd(b, row, LLVMConstInt(g->e.t_i64, 1, 0), ""), r_mem);
    LLVMBuildBr(b, hdr);
    LLVMPositionBuilderAtEnd(b, exit);
    if (g->has_elem)
        stream_fence(&c);
    LLVMBuildRetVoid(g->e.b);
done:
    fn_end(&c);
}

/* leaves(args, row, leaf_begin, leaf_end, vals, pos): the exported per-leaf entry point of a
 * single-stage kernel, results in kir_scalar form. */
static void build_leaves(gen *g)
{
    const kir_kernel *k = g->e.k;
    fnc c;
    LLVMTypeRef params[6] = {g->e.t_ptr, g->e.t_i64, g->e.t_i64, g->e.t_i64, g->e.t_ptr, g->e.t_ptr};
    fn_begin(g, &c, CG_SYM_LEAVES, LLVMFunctionType(g->e.t_void, params, 6, 0), false);
    if (!fn_ok(&c))
        goto done;
    int comb = k->stages[0].combiner, t = stage_type(k, 0);
    LLVMTypeRef et = cg_ty_of(&g->e, t);
    LLVMValueRef tv = entry_alloca(&c, et), tp = entry_alloca(&c, g->e.t_i64);
    LLVMValueRef lb = LLVMGetParam(c.fn, 2), vals = LLVMGetParam(c.fn, 4), pos = LLVMGetParam(c.fn, 5);
    loop_ctl l;
    LLVMValueRef leaf = loop_open(&c, &l, lb, LLVMGetParam(c.fn, 3));
    LLVMValueRef cargs[7] = {LLVMGetParam(c.fn, 0), LLVMGetParam(c.fn, 1), leaf, LLVMConstNull(g->e.t_ptr), tv, tp,
                             LLVMConstNull(g->e.t_ptr)};
    LLVMBuildCall2(g->e.b, g->leaf_ty, g->leaf_fn[0], cargs, 7, "");
    LLVMValueRef i = LLVMBuildSub(g->e.b, leaf, lb, "");
    scalar_out(g, LLVMBuildLoad2(g->e.b, et, tv, ""), t, gep1(g, g->e.t_i64, vals, i));
    if (is_arg_comb(comb)) {
        LLVMBasicBlockRef yes = block(&c, "pos"), no = block(&c, "pos_done");
        LLVMBuildCondBr(g->e.b, LLVMBuildIsNotNull(g->e.b, pos, ""), yes, no);
        LLVMPositionBuilderAtEnd(g->e.b, yes);
        LLVMBuildStore(g->e.b, LLVMBuildLoad2(g->e.b, g->e.t_i64, tp, ""), gep1(g, g->e.t_i64, pos, i));
        LLVMBuildBr(g->e.b, no);
        LLVMPositionBuilderAtEnd(g->e.b, no);
    }
    loop_close(&c, &l);
    LLVMBuildRetVoid(g->e.b);
done:
    fn_end(&c);
}

/* ---- The module -------------------------------------------------------------------------- */

static void make_alias_scopes(gen *g)
{
    const kir_kernel *k = g->e.k;
    g->md_scope = LLVMGetMDKindIDInContext(g->e.ctx, "alias.scope", 11);
    g->md_noalias = LLVMGetMDKindIDInContext(g->e.ctx, "noalias", 7);
    g->md_loop = LLVMGetMDKindIDInContext(g->e.ctx, "llvm.loop", 9);
    g->md_nontemporal = LLVMGetMDKindIDInContext(g->e.ctx, "nontemporal", 11);
    LLVMMetadataRef dom_ops[1] = {md_str(g, "burnc.buffers")};
    LLVMMetadataRef dom = LLVMMDNodeInContext2(g->e.ctx, dom_ops, 1);
    LLVMMetadataRef in_ops[2] = {md_str(g, "burnc.inputs"), dom};
    LLVMMetadataRef in = LLVMMDNodeInContext2(g->e.ctx, in_ops, 2);
    LLVMMetadataRef outs[KIR_MAX_OUTPUTS];
    for (int o = 0; o < k->n_outputs; o++) {
        char name[32];
        snprintf(name, sizeof name, "burnc.output%d", o);
        LLVMMetadataRef ops[2] = {md_str(g, name), dom};
        outs[o] = LLVMMDNodeInContext2(g->e.ctx, ops, 2);
    }
    bool in_place = false;
    for (int o = 0; o < k->n_outputs; o++)
        in_place |= k->in_place[o] != 0;
    if (k->n_outputs == 0 || in_place)
        return; /* nothing is written: loads need no scopes; or buffers are shared */
    g->load_scope = LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, &in, 1));
    g->load_noalias = LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, outs, (size_t)k->n_outputs));
    for (int o = 0; o < k->n_outputs; o++) {
        LLVMMetadataRef others[KIR_MAX_OUTPUTS + 1];
        size_t n = 0;
        others[n++] = in;
        for (int p = 0; p < k->n_outputs; p++)
            if (p != o)
                others[n++] = outs[p];
        g->store_scope[o] = LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, &outs[o], 1));
        g->store_noalias[o] = LLVMMetadataAsValue(g->e.ctx, LLVMMDNodeInContext2(g->e.ctx, others, n));
    }
}

/* Which of rows / leaves / finish the kernel gets (cg.h). */
typedef struct shape {
    bool elementwise, leaves, finish;
} shape;

static shape kernel_shape(const kir_kernel *k)
{
    bool has_elem = false;
    for (int s = 0; s < k->n_stores; s++)
        has_elem |= !k->stores[s].row;
    shape sh = {.elementwise = k->n_stages == 0 && k->n_outer == k->rank};
    sh.finish = !sh.elementwise;
    sh.leaves = k->n_stages == 1 && !has_elem;
    return sh;
}

/* Whether each instruction depends on the innermost axis (level 2 in the row functions). */
static void inner_dependent(const kir_kernel *k, uint8_t *dep)
{
    int inner = k->rank - 1;
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        dep[i] = in->op == KIR_LOAD    ? k->inputs[in->a].stride[inner] != KIR_STRIDE_ZERO
                 : in->op == KIR_INDEX ? in->a == inner
                                       : 0;
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < kir_n_operands(in->op); j++)
            dep[i] |= dep[ops[j]];
    }
}

/* The stash of a row kernel (see "The stash"): the values shared by the last stage and the
 * element stores that the element stores' own work reads, when the shared work has at least
 * STASH_MIN_WORK operations and at most STASH_VALUES such values, none boolean. */
enum { STASH_MIN_WORK = 6 };
static void choose_stash(gen *g)
{
    const kir_kernel *k = g->e.k;
    size_t n = (size_t)k->n_insts;
    g->n_stash = 0;
    if (!g->has_elem || !k->n_stages || k->n_outer == k->rank || !n)
        return;
    uint8_t *a = calloc(n, 1), *e = calloc(n, 1), *dep = calloc(n, 1), *front = calloc(n, 1);
    if (!a || !e || !dep || !front)
        goto done;
    int32_t roots[KIR_MAX_OUTPUTS];
    int n_roots = collect_stores(k, false, false, roots);
    mark_needed(k, &k->stages[k->n_stages - 1].value, 1, NULL, a);
    mark_needed(k, roots, n_roots, NULL, e);
    inner_dependent(k, dep);
    int work = 0;
    for (size_t i = 0; i < n; i++) {
        a[i] = a[i] && e[i] && dep[i]; /* now: shared */
        work += a[i] && k->insts[i].op != KIR_LOAD && k->insts[i].op != KIR_CONST;
    }
    if (work < STASH_MIN_WORK)
        goto done;
    for (int r = 0; r < n_roots; r++)
        front[roots[r]] |= a[roots[r]];
    for (size_t i = 0; i < n; i++) {
        const kir_inst *in = &k->insts[i];
        const int32_t ops[3] = {in->a, in->b, in->c};
        for (int j = 0; e[i] && !a[i] && j < kir_n_operands(in->op); j++)
            front[ops[j]] |= a[ops[j]];
    }
    int m = 0;
    int32_t pick[STASH_VALUES];
    for (size_t i = 0; i < n; i++) {
        if (!front[i])
            continue;
        if (m == STASH_VALUES || k->insts[i].type == KIR_BOOL)
            goto done;
        pick[m++] = (int32_t)i;
    }
    for (int v = 0; v < m; v++)
        g->stash[v] = pick[v];
    g->n_stash = m;
done:
    free(a);
    free(e);
    free(dep);
    free(front);
}

static void build_module(gen *g)
{
    const kir_kernel *k = g->e.k;
    for (int s = 0; s < k->n_stores; s++)
        *(k->stores[s].row ? &g->has_row : &g->has_elem) = true;
    make_alias_scopes(g);
    shape sh = kernel_shape(k);
    if (sh.elementwise) {
        build_rows_elementwise(g);
        return;
    }
    LLVMTypeRef leaf_params[7] = {g->e.t_ptr, g->e.t_i64, g->e.t_i64, g->e.t_ptr, g->e.t_ptr, g->e.t_ptr, g->e.t_ptr};
    LLVMTypeRef elem_params[4] = {g->e.t_ptr, g->e.t_i64, g->e.t_ptr, g->e.t_ptr};
    g->leaf_ty = LLVMFunctionType(g->e.t_void, leaf_params, 7, 0);
    g->elem_ty = LLVMFunctionType(g->e.t_void, elem_params, 4, 0);
    g->finish_ty = LLVMFunctionType(g->e.t_void, elem_params, 3, 0);
    choose_stash(g);
    g->cols = choose_cols(k);
    for (int s = 0; s < k->n_stages; s++) {
        build_leaf_fn(g, s);
        if (g->cols)
            build_cols_fn(g, s);
    }
    if (g->cols && g->has_elem)
        build_cols_elem_fn(g);
    if (g->has_elem)
        build_elem_fn(g);
    build_finish(g);
    build_rows_reduce(g);
    if (sh.leaves)
        build_leaves(g);
}

/* ---- Host target, JIT ---------------------------------------------------------------------- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static char init_error[256];
static char *host_triple, *host_cpu_name, *host_features;
static char *host_id;

static void init_llvm(void)
{
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    host_triple = LLVMGetDefaultTargetTriple();
    host_cpu_name = LLVMGetHostCPUName();
    host_features = LLVMGetHostCPUFeatures();
    if (!host_triple || !host_cpu_name || !host_features || strncmp(host_triple, "x86_64", 6) != 0) {
        snprintf(init_error, sizeof init_error, "burnc-llvm: the host (%s) is not x86-64",
                 host_triple ? host_triple : "unknown");
        return;
    }
    size_t n = strlen(host_cpu_name) + strlen(host_features) + 32;
    host_id = malloc(n);
    if (!host_id) {
        snprintf(init_error, sizeof init_error, "burnc-llvm: out of memory");
        return;
    }
    snprintf(host_id, n, "cpu=%s features=%s", host_cpu_name, host_features);
}

static const char *host_cpu(void)
{
    pthread_once(&init_once, init_llvm);
    return host_id ? host_id : "unknown";
}

LLVMTargetMachineRef cg_host_tm(char *err, size_t cap)
{
    pthread_once(&init_once, init_llvm);
    if (init_error[0]) {
        cg_failf(err, cap, "%s", init_error);
        return NULL;
    }
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(host_triple, &target, &msg)) {
        cg_failf(err, cap, "burnc-llvm: no target for %s: %s", host_triple, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, host_triple, host_cpu_name, host_features,
                                                      LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelSmall);
    if (!tm)
        cg_failf(err, cap, "burnc-llvm: cannot create a target machine for %s", host_cpu_name);
    return tm;
}

const char *cg_host_triple(void) { return host_triple; }

/* One LLJIT per process; each kernel gets a JITDylib of its own (the three symbol names are
 * the same in every kernel), recycled after release. */
static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static LLVMOrcLLJITRef jit;
static LLVMOrcJITDylibRef *free_jds;
static size_t n_free_jds, cap_free_jds;
static unsigned long jd_serial;

typedef struct jit_kernel {
    LLVMOrcJITDylibRef jd;
} jit_kernel;

static bool jit_start(char *err, size_t cap)
{
    if (jit)
        return true;
    LLVMTargetMachineRef tm = cg_host_tm(err, cap);
    if (!tm)
        return false;
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
    LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit, builder);
    if (e) {
        jit = NULL;
        return fail_llvm(err, cap, "burnc-llvm: cannot start LLJIT", e);
    }
    return true;
}

static LLVMOrcJITDylibRef jit_dylib(char *err, size_t cap)
{
    if (n_free_jds)
        return free_jds[--n_free_jds];
    char name[48];
    snprintf(name, sizeof name, "burnc_kernel_%lu", ++jd_serial);
    LLVMOrcJITDylibRef jd = LLVMOrcExecutionSessionCreateBareJITDylib(LLVMOrcLLJITGetExecutionSession(jit), name);
    LLVMOrcDefinitionGeneratorRef gen;
    /* fmod, fmodf, memset, memcpy: whatever the code calls comes from this process. */
    LLVMErrorRef e =
        LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL);
    if (e) {
        fail_llvm(err, cap, "burnc-llvm: process symbol generator", e);
        return NULL;
    }
    LLVMOrcJITDylibAddGenerator(jd, gen);
    return jd;
}

static void jit_recycle(LLVMOrcJITDylibRef jd)
{
    LLVMErrorRef e = LLVMOrcJITDylibClear(jd);
    if (e)
        LLVMConsumeError(e);
    pthread_mutex_lock(&jit_lock);
    if (n_free_jds == cap_free_jds) {
        size_t cap = cap_free_jds ? 2 * cap_free_jds : 16;
        LLVMOrcJITDylibRef *p = realloc(free_jds, cap * sizeof *p);
        if (p) {
            free_jds = p;
            cap_free_jds = cap;
        }
    }
    if (n_free_jds < cap_free_jds)
        free_jds[n_free_jds++] = jd; /* else the empty dylib just stays unused */
    pthread_mutex_unlock(&jit_lock);
}

typedef struct lookup_wait {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    char err[256];
    int n;
    LLVMOrcSymbolStringPoolEntryRef names[3];
    uint64_t addrs[3];
} lookup_wait;

static void lookup_done(LLVMErrorRef e, LLVMOrcCSymbolMapPairs res, size_t n, void *ctx)
{
    lookup_wait *w = ctx;
    if (e) {
        char *msg = LLVMGetErrorMessage(e);
        snprintf(w->err, sizeof w->err, "%s", msg);
        LLVMDisposeErrorMessage(msg);
    } else {
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < w->n; j++)
                if (res[i].Name == w->names[j])
                    w->addrs[j] = res[i].Sym.Address;
    }
    pthread_mutex_lock(&w->m);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->m);
}

/* Links the object (taking it) into a fresh dylib and finds the kernel's functions. */
static bool jit_link(LLVMMemoryBufferRef obj, shape sh, cg_cpu_kernel *out, char *err, size_t cap)
{
    pthread_mutex_lock(&jit_lock);
    bool ok = jit_start(err, cap);
    LLVMOrcJITDylibRef jd = ok ? jit_dylib(err, cap) : NULL;
    pthread_mutex_unlock(&jit_lock);
    if (!jd) {
        LLVMDisposeMemoryBuffer(obj);
        return false;
    }
    LLVMErrorRef e = LLVMOrcLLJITAddObjectFile(jit, jd, obj);
    if (e) {
        jit_recycle(jd);
        return fail_llvm(err, cap, "burnc-llvm: adding the object to the JIT", e);
    }
    const char *names[3] = {CG_SYM_ROWS, sh.leaves ? CG_SYM_LEAVES : NULL, sh.finish ? CG_SYM_FINISH : NULL};
    lookup_wait w = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    LLVMOrcCLookupSetElement set[4] = {{0}};
    int which[3];
    LLVMOrcExecutionSessionRef es = LLVMOrcLLJITGetExecutionSession(jit);
    for (int i = 0; i < 3; i++) {
        if (!names[i])
            continue;
        LLVMOrcSymbolStringPoolEntryRef s = LLVMOrcExecutionSessionIntern(es, names[i]);
        LLVMOrcRetainSymbolStringPoolEntry(s); /* one reference goes to the lookup set */
        set[w.n].Name = s;
        set[w.n].LookupFlags = LLVMOrcSymbolLookupFlagsRequiredSymbol;
        w.names[w.n] = s;
        which[w.n++] = i;
    }
    LLVMOrcCJITDylibSearchOrderElement order[2] = {{jd, LLVMOrcJITDylibLookupFlagsMatchExportedSymbolsOnly}, {0}};
    LLVMOrcExecutionSessionLookup(es, LLVMOrcLookupKindStatic, order, 1, set, (size_t)w.n, lookup_done, &w);
    pthread_mutex_lock(&w.m);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.m);
    pthread_mutex_unlock(&w.m);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.m);
    for (int i = 0; i < w.n; i++)
        LLVMOrcReleaseSymbolStringPoolEntry(w.names[i]);
    bool found = !w.err[0];
    for (int i = 0; found && i < w.n; i++)
        found = w.addrs[i] != 0;
    jit_kernel *jk = found ? malloc(sizeof *jk) : NULL;
    if (!jk) {
        jit_recycle(jd);
        return cg_failf(err, cap, "burnc-llvm: JIT lookup failed: %s", w.err[0] ? w.err : "a symbol is missing");
    }
    for (int i = 0; i < w.n; i++) {
        uintptr_t a = (uintptr_t)w.addrs[i];
        if (which[i] == 0)
            out->rows = (__typeof__(out->rows))a;
        else if (which[i] == 1)
            out->leaves = (__typeof__(out->leaves))a;
        else
            out->finish = (__typeof__(out->finish))a;
    }
    jk->jd = jd;
    out->impl = jk;
    return true;
}

static void release_cpu(cg_cpu_kernel *k)
{
    if (!k || !k->impl)
        return;
    jit_kernel *jk = k->impl;
    jit_recycle(jk->jd);
    free(jk);
    memset(k, 0, sizeof *k);
}

/* ---- compile_cpu ------------------------------------------------------------------------- */


/* BURNC_DUMP_DIR: the optimized LLVM IR of each kernel, named after it and its IR's hash. */
static void dump_ir(const kir_kernel *k, LLVMModuleRef m)
{
    const char *dir = getenv("BURNC_DUMP_DIR");
    if (!dir || !*dir)
        return;
    char *text = LLVMPrintModuleToString(m);
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (const char *p = text; *p; p++)
        h = (h ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
    char name[64], path[4096];
    size_t n = 0;
    for (const char *p = k->name[0] ? k->name : "kernel"; *p && n + 1 < sizeof name && p < k->name + sizeof k->name;
         p++)
        name[n++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
    name[n] = '\0';
    snprintf(path, sizeof path, "%s/%s-%016llx.ll", dir, name, (unsigned long long)h);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    LLVMDisposeMessage(text);
}

static bool optimize_and_emit(gen *g, LLVMTargetMachineRef tm, LLVMMemoryBufferRef *out, cg_llvm_times *tt, char *err,
                              size_t cap)
{
    char *msg = NULL;
    if (LLVMVerifyModule(g->e.mod, LLVMReturnStatusAction, &msg)) {
        cg_failf(err, cap, "burnc-llvm %s: invalid IR: %s", g->e.k->name, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return false;
    }
    LLVMDisposeMessage(msg);
    double t0 = now_ms();
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(g->e.mod, "default<O3>", tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (e)
        return fail_llvm(err, cap, "burnc-llvm: default<O3>", e);
    double t1 = now_ms();
    tt->opt_ms = t1 - t0;
    dump_ir(g->e.k, g->e.mod);
    msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, g->e.mod, LLVMObjectFile, &msg, out)) {
        cg_failf(err, cap, "burnc-llvm %s: code generation failed: %s", g->e.k->name, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return false;
    }
    tt->codegen_ms = now_ms() - t1;
    return true;
}

static bool compile_cpu_with(const kir_kernel *k, const cg_cpu_options *opt, cg_cpu_kernel *out, void **obj,
                             size_t *obj_size, char *err, size_t cap)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (obj)
        *obj = NULL;
    if (obj_size)
        *obj_size = 0;
    if (!out)
        return cg_failf(err, cap, "compile_cpu: no output");
    if (!cg_check_kernel(k, "compile_cpu", err, cap))
        return false;
    if (opt && opt->elem_width && opt->elem_width != 8 && opt->elem_width != 16 && opt->elem_width != 32)
        return cg_failf(err, cap, "compile_cpu %s: element width %d is not 8, 16 or 32", k->name, opt->elem_width);
    cg_llvm_times tt = {0};
    double t0 = now_ms();
    LLVMTargetMachineRef tm = cg_host_tm(err, cap);
    if (!tm)
        return false;
    gen g = {.e = {.k = k}};
    cg_module_begin(&g.e, tm, host_triple, k->name[0] ? k->name : "burnc_kernel");
    g.elem_width = opt && opt->elem_width ? opt->elem_width : strstr(host_features, "+avx512f") ? 16 : 8;
    build_module(&g);
    tt.ir_ms = now_ms() - t0;

    LLVMMemoryBufferRef buf = NULL;
    bool ok = optimize_and_emit(&g, tm, &buf, &tt, err, cap);
    cg_module_end(&g.e, tm);
    if (!ok)
        return false;

    double t2 = now_ms();
    size_t size = LLVMGetBufferSize(buf);
    if (obj) {
        *obj = malloc(size ? size : 1);
        if (!*obj) {
            LLVMDisposeMemoryBuffer(buf);
            return cg_failf(err, cap, "compile_cpu %s: no memory for a %zu-byte object", k->name, size);
        }
        memcpy(*obj, LLVMGetBufferStart(buf), size);
        if (obj_size)
            *obj_size = size;
    }
    if (!jit_link(buf, kernel_shape(k), out, err, cap)) {
        if (obj) {
            free(*obj);
            *obj = NULL;
            if (obj_size)
                *obj_size = 0;
        }
        return false;
    }
    tt.link_ms = now_ms() - t2;
    last_times = tt;
    return true;
}

static bool compile_cpu(const kir_kernel *k, cg_cpu_kernel *out, void **obj, size_t *obj_size, char *err, size_t cap)
{
    return compile_cpu_with(k, NULL, out, obj, obj_size, err, cap);
}

bool cg_llvm_compile_gemm(const cg_gemm_spec *spec, void **obj, size_t *obj_size, char *err,
                          size_t cap); /* llvm_gemm.c */
bool cg_llvm_compile_ptx(const kir_kernel *k, const cg_ptx_options *opt, const cg_ptx_luts *luts, char **ptx,
                         size_t *ptx_size, char *err, size_t cap); /* llvm_ptx.c */
bool cg_llvm_compile_mma_ptx(const cg_mma_spec *s, char **ptx, size_t *ptx_size, char *err,
                             size_t cap); /* ptx_mma.c */
bool cg_llvm_compile_ptx_gemm(const cg_ptx_gemm_spec *s, char **ptx, size_t *ptx_size, char *err,
                              size_t cap); /* ptx_gemm.c */

CG_EXPORT const cg_llvm_api burnc_llvm_api = {
    .abi = CG_LLVM_ABI,
    .llvm_version = LLVM_VERSION_STRING,
    .host_cpu = host_cpu,
    .compile_cpu = compile_cpu,
    .compile_cpu_with = compile_cpu_with,
    .release_cpu = release_cpu,
    .compile_gemm = cg_llvm_compile_gemm,
    .compile_ptx = cg_llvm_compile_ptx,
    .compile_mma_ptx = cg_llvm_compile_mma_ptx,
    .compile_ptx_gemm = cg_llvm_compile_ptx_gemm,
};
