/* The tensor-core matmul kernel generator (ptx_mma.h says what a kernel computes and how it is
 * launched): LLVM IR with the NVVM intrinsics for mma.sync, ldmatrix and cp.async, then
 * default<O3> and PTX, in the burnc-llvm module beside llvm_ptx.c.
 *
 * Everything that depends on the spec (tile loops, fragment offsets, stage layout) is unrolled
 * here in C, so the IR holds two run-time loops over K tiles (the K tiles whose copies lie
 * wholly inside K, then the rest); the accumulators (and the fragments carried from one K tile
 * to the next) live in allocas indexed by constants, which SROA turns into registers. */
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
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
    LLVMValueRef frag[16 * 4 + 32 * 2];                         /* allocas of i32: the next k-step's */
    struct fast_copy {
        bool on;          /* the thread's chunks share one column (threads % chunks per row == 0) */
        bool k_rows;      /* the stored rows run along k (the operand is m- or n-contiguous) */
        LLVMValueRef src; /* i64: the thread's first chunk of K tile 0 */
        LLVMValueRef kstep, rstep; /* i64 bytes: to the next K tile; to the thread's next chunk */
        LLVMValueRef dst;          /* i64: shared offset of the first chunk within a stage */
        LLVMValueRef valid;        /* k-contiguous: how many of the thread's chunks lie inside M or N */
        LLVMValueRef bytes;        /* m/n-contiguous: the bytes of each chunk (m/n edge) */
        int rows_per, n, pitch;    /* rows between a thread's chunks; chunks per thread; pitch */
    } fc[2];
    int esz, kstep, mi, ni, threads, n_acc;
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

/* Issues the copies of K tile kt into the stage at shared byte offset so (both i64); tiles
 * past K copy zeros. */
static void load_stage(mg *g, LLVMValueRef kt, LLVMValueRef so)
{
    const cg_mma_spec *s = g->s;
    LLVMValueRef k0 = mul(g, kt, k64(g, s->bk));
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

/* ---- Global -> shared for K tiles wholly inside K ---------------------------------------------
 * load_tile recomputes every chunk's address and edge from scratch, which cost more integer
 * instructions per K tile than the mma themselves. Inside K only the m/n edge can cut a chunk,
 * and it does not move with K, so each thread keeps one source address that steps by a
 * constant per K tile, and its chunks lie a constant number of rows apart (all in the same
 * column when the threads cover whole rows: `on`). */
static void fast_setup(mg *g, struct fast_copy *f, LLVMValueRef base, LLVMValueRef ld, LLVMValueRef mn0,
                       LLVMValueRef mn_ext, bool k_rows, int rows, int cols, int pitch, int part_off)
{
    LLVMBuilderRef b = g->e.b;
    int per = 16 / g->esz, cpr = cols / per;
    f->on = g->threads % cpr == 0 && (rows * cpr) % g->threads == 0;
    if (!f->on)
        return;
    f->k_rows = k_rows, f->rows_per = g->threads / cpr, f->n = rows * cpr / g->threads, f->pitch = pitch;
    LLVMValueRef r0 = LLVMBuildUDiv(b, g->tid, k64(g, cpr), ""), c = LLVMBuildURem(b, g->tid, k64(g, cpr), "");
    LLVMValueRef cel = mul(g, c, k64(g, per)), esz = k64(g, g->esz), zero = k64(g, 0);
    f->rstep = mul(g, mul(g, ld, k64(g, f->rows_per)), esz);
    f->dst = add(g, k64(g, part_off), add(g, mul(g, r0, k64(g, pitch)), mul(g, c, k64(g, 16))));
    /* a chunk past the m/n edge copies nothing but still names an address: the edge's own
     * row or column 0, always inside the matrix, so no per-chunk choice of address is needed */
    if (k_rows) { /* rows along k, columns along m/n */
        LLVMValueRef col = add(g, mn0, cel), left = LLVMBuildSub(b, mn_ext, col, "");
        left = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, left, zero, ""), zero, left, "");
        left = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, left, k64(g, per), ""), k64(g, per), left, "");
        f->bytes = mul(g, left, esz);
        col = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, left, zero, ""), col, zero, "");
        f->src = add(g, base, mul(g, add(g, mul(g, r0, ld), col), esz));
        f->kstep = mul(g, mul(g, ld, k64(g, g->s->bk)), esz);
    } else { /* rows along m/n, columns along k: chunk i is inside while i < valid */
        LLVMValueRef row = add(g, mn0, r0), left = LLVMBuildSub(b, mn_ext, row, "");
        LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSGT, left, zero, "");
        LLVMValueRef v = LLVMBuildUDiv(b, add(g, left, k64(g, f->rows_per - 1)), k64(g, f->rows_per), "");
        v = LLVMBuildSelect(b, in, v, zero, "");
        f->valid = LLVMBuildTrunc(b, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGT, v, k64(g, f->n), ""),
                                                     k64(g, f->n), v, ""),
                                  g->e.t_i32, "");
        row = LLVMBuildSelect(b, in, row, zero, "");
        f->src = add(g, base, mul(g, add(g, mul(g, row, ld), cel), esz));
        f->kstep = k64(g, (int64_t)g->s->bk * g->esz);
    }
}

/* The copies of K tile kt into the stage at so. At the k edge (edge: kt may reach past K) a
 * chunk is cut there too, and one that copies nothing reads from the batch's first element. */
static void fast_load(mg *g, const struct fast_copy *f, LLVMValueRef kt, LLVMValueRef so, LLVMValueRef safe,
                      bool edge)
{
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef p = add(g, f->src, mul(g, kt, f->kstep)), dst = add(g, so, f->dst), src = p;
    LLVMValueRef k0 = mul(g, kt, k64(g, g->s->bk)), zero = k64(g, 0), kbytes = NULL;
    int per = 16 / g->esz, cpr = f->k_rows ? 0 : g->threads / f->rows_per;
    if (edge && !f->k_rows) { /* this thread's k column, and what of its chunk lies inside K */
        LLVMValueRef col = add(g, k0, mul(g, LLVMBuildURem(b, g->tid, k64(g, cpr), ""), k64(g, per)));
        LLVMValueRef left = LLVMBuildSub(b, g->p[P_K], col, "");
        left = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, left, zero, ""), zero, left, "");
        left = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, left, k64(g, per), ""), k64(g, per), left, "");
        kbytes = LLVMBuildTrunc(b, mul(g, left, k64(g, g->esz)), g->e.t_i32, "");
    }
    for (int it = 0; it < f->n; it++) {
        LLVMValueRef bytes;
        /* stepped, not p + it * rstep: the hoisted products would each hold two registers */
        if (it > 0)
            src = add(g, src, f->rstep);
        if (f->k_rows) {
            bytes = LLVMBuildTrunc(b, f->bytes, g->e.t_i32, "");
            if (edge) {
                LLVMValueRef r0 = LLVMBuildUDiv(b, g->tid, k64(g, g->threads / f->rows_per), "");
                LLVMValueRef row = add(g, k0, add(g, r0, k64(g, (int64_t)it * f->rows_per)));
                bytes = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, row, g->p[P_K], ""), bytes, k32(g, 0), "");
            }
        } else {
            LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLT, k32(g, it), f->valid, "");
            bytes = LLVMBuildSelect(b, in, edge ? kbytes : k32(g, 16), k32(g, 0), "");
        }
        LLVMValueRef from = src;
        if (edge)
            from = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, bytes, k32(g, 0), ""), src, safe, "");
        else if (!f->k_rows && it > 0)
            from = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, k32(g, it), f->valid, ""), src, p, "");
        LLVMValueRef args[3] = {sptr(g, add(g, dst, k64(g, (int64_t)it * f->rows_per * f->pitch))),
                                LLVMBuildIntToPtr(b, from, g->t_gptr, ""), bytes};
        call0(g, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
    }
}

static bool fast_ok(mg *g) { return g->fc[0].on && g->fc[1].on; }

static void fast_init(mg *g)
{
    const cg_mma_spec *s = g->s;
    LLVMValueRef abase = add(g, g->p[P_A], mul(g, g->batch, mul(g, g->p[P_ABS], k64(g, g->esz))));
    LLVMValueRef bbase = add(g, g->p[P_B], mul(g, g->batch, mul(g, g->p[P_BBS], k64(g, g->esz))));
    if (s->a_mmajor)
        fast_setup(g, &g->fc[0], abase, g->p[P_ALD], g->row0, g->p[P_M], true, s->bk, s->bm,
                   cg_mma_pitch(s, s->bm, false), 0);
    else
        fast_setup(g, &g->fc[0], abase, g->p[P_ALD], g->row0, g->p[P_M], false, s->bm, s->bk,
                   cg_mma_pitch(s, s->bk, true), 0);
    if (s->b_kmajor)
        fast_setup(g, &g->fc[1], bbase, g->p[P_BLD], g->col0, g->p[P_N], false, s->bn, s->bk,
                   cg_mma_pitch(s, s->bk, true), cg_mma_a_bytes(s));
    else
        fast_setup(g, &g->fc[1], bbase, g->p[P_BLD], g->col0, g->p[P_N], true, s->bk, s->bn,
                   cg_mma_pitch(s, s->bn, false), cg_mma_a_bytes(s));
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

/* The same rounding of f32 bits (an i32) that ldmatrix brought. */
static LLVMValueRef tf32_rna(mg *g, LLVMValueRef bits)
{
    LLVMValueRef v = LLVMBuildBitCast(g->e.b, bits, g->e.t_f32, "");
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

/* The warp's fragments of k-step ks of the stage at shared byte offset so (i64), into fr:
 * A's (i * 4 + h) first, then B's (mi * 4 + j * 2 + h). Lane l of ldmatrix names row l & 7 of
 * matrix l >> 3; the matrix order below is the fragment register order of mma's A (rows 0-7 /
 * 8-15 by k 0-7 / 8-15) and B (k 0-7 / 8-15 of two n8 tiles). */
static void load_frags(mg *g, LLVMValueRef so, int ks, LLVMValueRef *fr)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef ao = so, bo = add(g, so, k64(g, cg_mma_a_bytes(s)));
    int pa = s->a_mmajor ? cg_mma_pitch(s, s->bm, false) : cg_mma_pitch(s, s->bk, true);
    int pb = s->b_kmajor ? cg_mma_pitch(s, s->bk, true) : cg_mma_pitch(s, s->bn, false);
    LLVMValueRef l = g->lane, q = LLVMBuildLShr(b, l, k64(g, 3), ""), r8 = LLVMBuildAnd(b, l, k64(g, 7), "");
    LLVMValueRef gid = LLVMBuildLShr(b, l, k64(g, 2), ""), tig = LLVMBuildAnd(b, l, k64(g, 3), "");
    LLVMValueRef q_lo8 = mul(g, LLVMBuildAnd(b, q, k64(g, 1), ""), k64(g, 8));
    LLVMValueRef q_hi8 = mul(g, LLVMBuildLShr(b, q, k64(g, 1), ""), k64(g, 8));
    LLVMValueRef *bf = fr + g->mi * 4;
    int k0 = ks * g->kstep;
    for (int i = 0; i < g->mi; i++) {
        LLVMValueRef m0 = add(g, g->wm_off, k64(g, i * 16)), *af = fr + i * 4;
        if (g->s->type == CG_MMA_TF32 && !s->a_mmajor) {
            /* ldmatrix moves 32-bit words as pairs of b16: of 8 rows of 4 words, lane l gets
             * word l & 3 of row l >> 2, which for rows along m and words along k are exactly
             * the fragments (g, t), (g+8, t), (g, t+4), (g+8, t+4) of matrices 0..3 */
            LLVMValueRef m = add(g, m0, add(g, r8, q_lo8));
            LLVMValueRef k = add(g, k64(g, k0), mul(g, LLVMBuildLShr(b, l, k64(g, 4), ""), k64(g, 4)));
            ldmatrix(g, add(g, ao, at(g, m, k, pa)), false, af);
            for (int h = 0; h < 4; h++)
                af[h] = tf32_rna(g, af[h]);
        } else if (g->s->type == CG_MMA_TF32) {
            for (int h = 0; h < 4; h++) { /* (g, t), (g+8, t), (g, t+4), (g+8, t+4) */
                LLVMValueRef m = add(g, m0, add(g, gid, k64(g, (h & 1) * 8)));
                LLVMValueRef k = add(g, k64(g, k0 + (h >> 1) * 4), tig);
                af[h] = ld_tf32(g, add(g, ao, s->a_mmajor ? at(g, k, m, pa) : at(g, m, k, pa)));
            }
        } else if (s->a_mmajor) {
            LLVMValueRef k = add(g, k64(g, k0), add(g, r8, q_hi8)), m = add(g, m0, q_lo8);
            ldmatrix(g, add(g, ao, at(g, k, m, pa)), true, af);
        } else {
            LLVMValueRef m = add(g, m0, LLVMBuildAnd(b, l, k64(g, 15), ""));
            LLVMValueRef k = add(g, k64(g, k0), mul(g, LLVMBuildLShr(b, l, k64(g, 4), ""), k64(g, 8)));
            ldmatrix(g, add(g, ao, at(g, m, k, pa)), false, af);
        }
    }
    for (int j = 0; j < g->ni; j += g->s->type == CG_MMA_TF32 ? 1 : 2) {
        LLVMValueRef n0 = add(g, g->wn_off, k64(g, j * 8));
        if (g->s->type == CG_MMA_TF32 && s->b_kmajor) {
            /* as for A: rows along n, words along k; matrices 2 and 3 are the next n8 tile */
            LLVMValueRef n = add(g, n0, add(g, r8, q_hi8));
            LLVMValueRef k = add(g, k64(g, k0), mul(g, LLVMBuildAnd(b, q, k64(g, 1), ""), k64(g, 4)));
            ldmatrix(g, add(g, bo, at(g, n, k, pb)), false, bf + j * 2);
            for (int h = 0; h < 4; h++)
                bf[j * 2 + h] = tf32_rna(g, bf[j * 2 + h]);
            j++;
            continue;
        }
        if (g->s->type == CG_MMA_TF32) {
            for (int h = 0; h < 2; h++) { /* (k = t, n = g), (k = t + 4, n = g) */
                LLVMValueRef n = add(g, n0, gid), k = add(g, k64(g, k0 + h * 4), tig);
                bf[j * 2 + h] = ld_tf32(g, add(g, bo, s->b_kmajor ? at(g, n, k, pb) : at(g, k, n, pb)));
            }
            continue;
        }
        if (s->b_kmajor) {
            LLVMValueRef n = add(g, n0, add(g, r8, q_hi8)), k = add(g, k64(g, k0), q_lo8);
            ldmatrix(g, add(g, bo, at(g, n, k, pb)), false, bf + j * 2);
        } else {
            LLVMValueRef k = add(g, k64(g, k0), add(g, r8, q_lo8)), n = add(g, n0, q_hi8);
            ldmatrix(g, add(g, bo, at(g, k, n, pb)), true, bf + j * 2);
        }
    }
}

static void mma_frags(mg *g, LLVMValueRef *fr)
{
    for (int i = 0; i < g->mi; i++)
        for (int j = 0; j < g->ni; j++)
            mma(g, fr + i * 4, fr + g->mi * 4 + j * 2, (i * g->ni + j) * 4);
}

static int n_frags(const mg *g) { return g->mi * 4 + g->ni * 2; }

static void frags_store(mg *g, LLVMValueRef *fr)
{
    for (int i = 0; i < n_frags(g); i++)
        LLVMBuildStore(g->e.b, fr[i], g->frag[i]);
}

static void frags_load(mg *g, LLVMValueRef *fr)
{
    for (int i = 0; i < n_frags(g); i++)
        fr[i] = LLVMBuildLoad2(g->e.b, g->e.t_i32, g->frag[i], "");
}

/* ---- Stores --------------------------------------------------------------------------------- */

static LLVMValueRef to_c(mg *g, LLVMValueRef v)
{
    if (g->s->type == CG_MMA_TF32)
        return v;
    /* rounded once, to nearest even (cvt.rn) */
    LLVMTypeRef h = g->s->type == CG_MMA_F16 ? LLVMHalfTypeInContext(g->e.ctx) : LLVMBFloatTypeInContext(g->e.ctx);
    return LLVMBuildFPTrunc(g->e.b, v, h, "");
}

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
    LLVMValueRef st = LLVMBuildStore(b, to_c(g, v), addr);
    LLVMSetAlignment(st, (unsigned)g->esz);
    LLVMBuildBr(b, next);
    LLVMPositionBuilderAtEnd(b, next);
}

/* Elements (row, col) and (row, col + 1): one store of both where both lie inside C and their
 * address is aligned to the pair (C's base is only element-aligned), else one at a time. */
static void store_pair(mg *g, LLVMValueRef row, LLVMValueRef col, LLVMValueRef v0, LLVMValueRef v1)
{
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef e = add(g, mul(g, g->batch, g->p[P_CBS]), add(g, mul(g, row, g->p[P_N]), col));
    LLVMValueRef addr = add(g, g->p[P_C], mul(g, e, k64(g, g->esz)));
    LLVMValueRef ok = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, row, g->p[P_M], ""),
                                   LLVMBuildICmp(b, LLVMIntSLT, add(g, col, k64(g, 1)), g->p[P_N], ""), "");
    LLVMValueRef misaligned = LLVMBuildAnd(b, addr, k64(g, 2 * g->esz - 1), "");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntEQ, misaligned, k64(g, 0), ""), "");
    LLVMBasicBlockRef two = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "st2");
    LLVMBasicBlockRef ones = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "st1");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "st.next");
    LLVMBuildCondBr(b, ok, two, ones);
    LLVMPositionBuilderAtEnd(b, two);
    LLVMValueRef c0 = to_c(g, v0), c1 = to_c(g, v1);
    LLVMValueRef vec = LLVMGetUndef(LLVMVectorType(LLVMTypeOf(c0), 2));
    vec = LLVMBuildInsertElement(b, vec, c0, k32(g, 0), "");
    vec = LLVMBuildInsertElement(b, vec, c1, k32(g, 1), "");
    LLVMValueRef st = LLVMBuildStore(b, vec, LLVMBuildIntToPtr(b, addr, g->t_gptr, ""));
    LLVMSetAlignment(st, (unsigned)(2 * g->esz));
    LLVMBuildBr(b, next);
    LLVMPositionBuilderAtEnd(b, ones);
    store_one(g, row, col, v0);
    store_one(g, row, add(g, col, k64(g, 1)), v1);
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
            for (int h = 0; h < 4; h += 2) {
                LLVMValueRef row = add(g, add(g, g->row0, g->wm_off), add(g, gid, k64(g, i * 16 + (h >> 1) * 8)));
                LLVMValueRef col = add(g, add(g, g->col0, g->wn_off), add(g, mul(g, tig, k64(g, 2)), k64(g, j * 8)));
                int a = (i * g->ni + j) * 4 + h;
                store_pair(g, row, col, LLVMBuildLoad2(b, g->e.t_f32, g->acc[a], ""),
                           LLVMBuildLoad2(b, g->e.t_f32, g->acc[a + 1], ""));
            }
}

/* ---- The K loop ------------------------------------------------------------------------------ */

/* Runs K tiles kt_var .. end - 1 (i64); fast: all their copies lie inside K. Without s->pipe
 * each tile waits and syncs first, then loads each k-step's fragments before its mma. With it,
 * software-pipelined: each k-step loads the next one's
 * fragments before its mma, and the last one waits for tile kt + 1 (and for every warp to be
 * past tile kt - 1) to load the first fragments of tile kt + 1 (kept in g->frag across
 * iterations), so ldmatrix latency hides behind mma even across the barrier. The copies of
 * tile kt + stages - 1 then overwrite tile kt - 1's buffer, which no warp reads after that
 * barrier. rs_var / ws_var hold the byte offsets of the stages read and written next. */
static void k_loop(mg *g, LLVMValueRef kt_var, LLVMValueRef rs_var, LLVMValueRef ws_var, LLVMValueRef end, bool fast)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    int sbytes = cg_mma_a_bytes(s) + cg_mma_b_bytes(s), nks = s->bk / g->kstep;
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, fast ? "kt.fast" : "kt");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "kt.body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "kt.done");
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef kt = LLVMBuildLoad2(b, g->e.t_i64, kt_var, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, kt, end, ""), body, done);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef rs = LLVMBuildLoad2(b, g->e.t_i64, rs_var, ""), ws = LLVMBuildLoad2(b, g->e.t_i64, ws_var, "");
    LLVMValueRef ring = k64(g, (int64_t)s->stages * sbytes), wait = k32(g, s->stages - 2);
    LLVMValueRef fr[2][16 * 4 + 32 * 2];
    if (s->pipe) {
        frags_load(g, fr[0]);
    } else { /* tile kt has landed, and every warp is past tile kt - 1 */
        call0(g, "llvm.nvvm.cp.async.wait.group", &wait, 1);
        call0(g, "llvm.nvvm.barrier0", NULL, 0);
        LLVMValueRef nrs = add(g, rs, k64(g, sbytes));
        LLVMBuildStore(b, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, nrs, ring, ""), k64(g, 0), nrs, ""), rs_var);
    }
    for (int ks = 0; ks < nks; ks++) {
        LLVMValueRef *cur = fr[ks & 1], *next = fr[(ks + 1) & 1];
        if (!s->pipe) {
            load_frags(g, rs, ks, cur);
        } else if (ks < nks - 1) {
            load_frags(g, rs, ks + 1, next);
        } else {
            call0(g, "llvm.nvvm.cp.async.wait.group", &wait, 1);
            call0(g, "llvm.nvvm.barrier0", NULL, 0);
            LLVMValueRef nrs = add(g, rs, k64(g, sbytes));
            nrs = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, nrs, ring, ""), k64(g, 0), nrs, "");
            LLVMBuildStore(b, nrs, rs_var);
            load_frags(g, nrs, 0, next);
            frags_store(g, next);
        }
        if (ks == 0) {
            LLVMValueRef nk = add(g, kt, k64(g, s->stages - 1));
            if (fast_ok(g)) {
                LLVMValueRef ab = NULL, bb = NULL;
                if (!fast) { /* recomputed here, so that nothing of the edge is live in the first loop */
                    ab = add(g, g->p[P_A], mul(g, g->batch, mul(g, g->p[P_ABS], k64(g, g->esz))));
                    bb = add(g, g->p[P_B], mul(g, g->batch, mul(g, g->p[P_BBS], k64(g, g->esz))));
                }
                fast_load(g, &g->fc[0], nk, ws, ab, !fast);
                fast_load(g, &g->fc[1], nk, ws, bb, !fast);
                call0(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
            } else {
                load_stage(g, nk, ws);
            }
            LLVMValueRef nws = add(g, ws, k64(g, sbytes));
            nws = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, nws, ring, ""), k64(g, 0), nws, "");
            LLVMBuildStore(b, nws, ws_var);
        }
        mma_frags(g, cur);
    }
    LLVMBuildStore(b, add(g, kt, k64(g, 1)), kt_var);
    LLVMBuildBr(b, head);
    LLVMPositionBuilderAtEnd(b, done);
}

/* ---- The entry ------------------------------------------------------------------------------ */

static void annotate1(mg *g, const char *key, int v)
{
    LLVMContextRef c = g->e.ctx;
    LLVMMetadataRef ops[3] = {LLVMValueAsMetadata(g->fn), LLVMMDStringInContext2(c, key, strlen(key)),
                              LLVMValueAsMetadata(k32(g, v))};
    LLVMAddNamedMetadataOperand(g->e.mod, "nvvm.annotations",
                                LLVMMetadataAsValue(c, LLVMMDNodeInContext2(c, ops, 3)));
}

/* minctasm makes ptxas hold registers to what that many blocks per SM leave each thread */
static void annotate(mg *g)
{
    annotate1(g, "maxntidx", g->threads);
    if (g->s->min_blocks > 1)
        annotate1(g, "minctasm", g->s->min_blocks);
}

/* The entry, its parameters, the dynamic shared memory and the block's place in C (both
 * kernels). */
static void begin(mg *g)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    LLVMTypeRef pt[CG_MMA_N_PARAMS + 2];
    int np = CG_MMA_N_PARAMS + (s->wg ? 2 : 0);
    for (int i = 0; i < np; i++)
        pt[i] = i < CG_MMA_N_PARAMS ? g->e.t_i64 : LLVMPointerTypeInContext(g->e.ctx, 0);
    g->fn = LLVMAddFunction(g->e.mod, CG_MMA_ENTRY, LLVMFunctionType(g->e.t_void, pt, (unsigned)np, 0));
    LLVMSetFunctionCallConv(g->fn, LLVMPTXKernelCallConv);
    for (int i = CG_MMA_N_PARAMS; i < np; i++) { /* the tensor maps: .param .align 64 .b8 [128] */
        LLVMAttributeRef by = LLVMCreateTypeAttribute(g->e.ctx, LLVMGetEnumAttributeKindForName("byval", 5),
                                                      LLVMArrayType2(g->e.t_i8, 128));
        LLVMAttributeRef al = LLVMCreateEnumAttribute(g->e.ctx, LLVMGetEnumAttributeKindForName("align", 5), 64);
        LLVMAddAttributeAtIndex(g->fn, (unsigned)i + 1, by);
        LLVMAddAttributeAtIndex(g->fn, (unsigned)i + 1, al);
    }
    annotate(g);
    for (int i = 0; i < CG_MMA_N_PARAMS; i++)
        g->p[i] = LLVMGetParam(g->fn, (unsigned)i);
    LLVMTypeRef st = LLVMArrayType2(g->e.t_i8, 0);
    g->smem = LLVMAddGlobalInAddressSpace(g->e.mod, st, "burnc_mma_smem", 3);
    LLVMSetLinkage(g->smem, LLVMExternalLinkage);
    LLVMSetAlignment(g->smem, 16);

    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "entry"));
    for (int i = 0; i < g->n_acc; i++) {
        g->acc[i] = LLVMBuildAlloca(b, g->e.t_f32, "");
        LLVMBuildStore(b, LLVMConstReal(g->e.t_f32, 0.0), g->acc[i]);
    }
    cg_ptx_grid_dependency(g->e.ctx, b, s->sm);
    g->tid = sreg(g, "tid.x");
    g->lane = LLVMBuildAnd(b, g->tid, k64(g, 31), "");
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
}

static void build(mg *g)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    begin(g);
    LLVMValueRef kt_var = LLVMBuildAlloca(b, g->e.t_i64, "");
    LLVMValueRef warp = LLVMBuildLShr(b, g->tid, k64(g, 5), "");
    g->wm_off = mul(g, LLVMBuildUDiv(b, warp, k64(g, s->wn), ""), k64(g, s->bm / s->wm));
    g->wn_off = mul(g, LLVMBuildURem(b, warp, k64(g, s->wn), ""), k64(g, s->bn / s->wn));
    LLVMValueRef n_kt = LLVMBuildUDiv(b, add(g, g->p[P_K], k64(g, s->bk - 1)), k64(g, s->bk), "");

    for (int i = 0; s->pipe && i < n_frags(g); i++)
        g->frag[i] = LLVMBuildAlloca(b, g->e.t_i32, "");
    LLVMValueRef rs_var = LLVMBuildAlloca(b, g->e.t_i64, ""), ws_var = LLVMBuildAlloca(b, g->e.t_i64, "");
    int sbytes = cg_mma_a_bytes(s) + cg_mma_b_bytes(s);
    fast_init(g);
    LLVMValueRef n_full = LLVMBuildUDiv(b, g->p[P_K], k64(g, s->bk), "");
    for (int st = 0; st < s->stages - 1; st++)
        load_stage(g, k64(g, st), k64(g, (int64_t)st * sbytes));
    if (s->pipe) {
        LLVMValueRef wait = k32(g, s->stages - 2), fr[16 * 4 + 32 * 2];
        call0(g, "llvm.nvvm.cp.async.wait.group", &wait, 1);
        call0(g, "llvm.nvvm.barrier0", NULL, 0);
        load_frags(g, k64(g, 0), 0, fr);
        frags_store(g, fr);
    }
    LLVMBuildStore(b, k64(g, 0), rs_var);
    LLVMBuildStore(b, k64(g, (int64_t)(s->stages - 1) * sbytes), ws_var);
    LLVMBuildStore(b, k64(g, 0), kt_var);
    /* K tiles below n_full lie wholly inside K: while the copies stay there, the first loop
     * skips the k edge; a second loop runs the rest with the general copies (a loop of its
     * own, so their values never stay live in the first) */
    if (fast_ok(g)) {
        LLVMValueRef ahead = k64(g, s->stages - 1);
        LLVMValueRef n_main = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGT, n_full, ahead, ""),
                                              LLVMBuildSub(b, n_full, ahead, ""), k64(g, 0), "");
        k_loop(g, kt_var, rs_var, ws_var, n_main, true);
    }
    k_loop(g, kt_var, rs_var, ws_var, n_kt, false);
    /* the zero-filling copies past K may still be in flight: none may land after exit */
    call0(g, "llvm.nvvm.cp.async.wait.all", NULL, 0);
    store_c(g);
    LLVMBuildRetVoid(b);
}

/* ---- The warpgroup kernel (sm_90a) -------------------------------------------------------------
 * LLVM 19 has no wgmma intrinsics: the instructions are inline asm. Each asm that touches the
 * accumulators takes and gives back all it touches (tied operands), so nothing moves them
 * while a wgmma is in flight. */

static LLVMValueRef inline_asm(mg *g, LLVMTypeRef ret, const char *text, const char *cons, LLVMValueRef *args, int n)
{
    LLVMTypeRef at[MAX_ACC + 2];
    for (int i = 0; i < n; i++)
        at[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(ret, at, (unsigned)n, 0);
    LLVMValueRef f = LLVMGetInlineAsm(ft, text, strlen(text), cons, strlen(cons), 1, 0, LLVMInlineAsmDialectATT, 0);
    return LLVMBuildCall2(g->e.b, ft, f, args, (unsigned)n, "");
}

static void asm_plain(mg *g, const char *text) { inline_asm(g, g->e.t_void, text, "~{memory}", NULL, 0); }

/* text reads and writes acc[first .. first + count) as $0.. (their tied inputs are
 * $count..), then reads the i64 operands extra as $(2 count).. */
static void asm_acc(mg *g, const char *text, int first, int count, LLVMValueRef *extra, int n_extra)
{
    LLVMBuilderRef b = g->e.b;
    char cons[MAX_ACC * 9 + 64];
    size_t len = 0;
    LLVMTypeRef ft[MAX_ACC];
    LLVMValueRef args[MAX_ACC + 2];
    for (int i = 0; i < count; i++)
        len += (size_t)snprintf(cons + len, sizeof cons - len, "=f,");
    for (int i = 0; i < count; i++)
        len += (size_t)snprintf(cons + len, sizeof cons - len, "%d,", i);
    for (int i = 0; i < n_extra; i++)
        len += (size_t)snprintf(cons + len, sizeof cons - len, "l,");
    snprintf(cons + len, sizeof cons - len, "~{memory}");
    for (int i = 0; i < count; i++) {
        ft[i] = g->e.t_f32;
        args[i] = LLVMBuildLoad2(b, g->e.t_f32, g->acc[first + i], "");
    }
    for (int i = 0; i < n_extra; i++)
        args[count + i] = extra[i];
    LLVMValueRef r = inline_asm(g, LLVMStructTypeInContext(g->e.ctx, ft, (unsigned)count, 0), text, cons, args,
                                count + n_extra);
    for (int i = 0; i < count; i++)
        LLVMBuildStore(b, LLVMBuildExtractValue(b, r, (unsigned)i, ""), g->acc[first + i]);
}

/* wgmma.wait_group n, holding every accumulator until then. */
static void wg_wait(mg *g, int n)
{
    char text[64];
    snprintf(text, sizeof text, "wgmma.wait_group.sync.aligned %d;", n);
    asm_acc(g, text, 0, g->n_acc, NULL, 0);
}

/* One m64 x bn x kstep wgmma into the accumulators of slab `slab`, operands named by the
 * shared-memory descriptors da and db. */
static void wg_mma(mg *g, int slab, LLVMValueRef da, LLVMValueRef db)
{
    const cg_mma_spec *s = g->s;
    int n = s->bn / 2;
    char text[MAX_ACC * 6 + 200];
    static const char *names[] = {"f16", "bf16", "tf32"};
    size_t len = (size_t)snprintf(text, sizeof text, "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {", s->bn,
                                  g->kstep, names[s->type], names[s->type]);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s$%d", i ? ", " : "", i);
    if (s->type == CG_MMA_TF32)
        snprintf(text + len, sizeof text - len, "}, $%d, $%d, 1, 1, 1;", 2 * n, 2 * n + 1);
    else /* imm-trans: an operand stored with m or n contiguous */
        snprintf(text + len, sizeof text - len, "}, $%d, $%d, 1, 1, 1, %d, %d;", 2 * n, 2 * n + 1, s->a_mmajor,
                 !s->b_kmajor);
    LLVMValueRef d[2] = {da, db};
    asm_acc(g, text, slab * n, n, d, 2);
}

/* A wgmma shared-memory descriptor (128-byte swizzle) of the tile at shared address addr
 * (i64), with leading and stride byte offsets lbo and sbo. */
static LLVMValueRef wg_desc(mg *g, LLVMValueRef addr, int lbo, int sbo)
{
    LLVMBuilderRef b = g->e.b;
    LLVMValueRef lo = LLVMBuildLShr(b, LLVMBuildAnd(b, addr, k64(g, 0x3ffff), ""), k64(g, 4), "");
    uint64_t hi = (uint64_t)((lbo >> 4) & 0x3fff) << 16 | (uint64_t)((sbo >> 4) & 0x3fff) << 32 | 1ull << 62;
    return LLVMBuildOr(b, lo, LLVMConstInt(g->e.t_i64, hi, 0), "");
}

static LLVMValueRef i32_of(mg *g, LLVMValueRef v) { return LLVMBuildTrunc(g->e.b, v, g->e.t_i32, ""); }

/* asm with 32-bit operands only and no result. */
static void asm_r(mg *g, const char *text, LLVMValueRef *args, int n)
{
    char cons[64] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(cons + len, sizeof cons - len, "r,");
    snprintf(cons + len, sizeof cons - len, "~{memory}");
    inline_asm(g, g->e.t_void, text, cons, args, n);
}

/* Spins until the mbarrier at shared address bar (i32) completes the phase of parity par. */
static void bar_wait(mg *g, LLVMValueRef bar, LLVMValueRef par)
{
    LLVMValueRef a[2] = {bar, par};
    asm_r(g,
          "{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1; @p bra D; bra W; D: }", a, 2);
}

/* A counted loop `for (i = 0; i < end; i++)` over the alloca var: opens the body with *i. */
typedef struct loop {
    LLVMBasicBlockRef head, done;
    LLVMValueRef var, i;
} loop;

static loop loop_begin(mg *g, LLVMValueRef var, LLVMValueRef end)
{
    LLVMBuilderRef b = g->e.b;
    loop l = {.var = var};
    LLVMBuildStore(b, k64(g, 0), var);
    l.head = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "loop");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "loop.body");
    l.done = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "loop.done");
    LLVMBuildBr(b, l.head);
    LLVMPositionBuilderAtEnd(b, l.head);
    l.i = LLVMBuildLoad2(b, g->e.t_i64, var, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, l.i, end, ""), body, l.done);
    LLVMPositionBuilderAtEnd(b, body);
    return l;
}

static void loop_end(mg *g, const loop *l)
{
    LLVMBuildStore(g->e.b, add(g, l->i, k64(g, 1)), l->var);
    LLVMBuildBr(g->e.b, l->head);
    LLVMPositionBuilderAtEnd(g->e.b, l->done);
}

/* The producer: lane 0 of the last warp fills stage t % S with K tile t by the tensor copy
 * engine once the consumers released the tile that was there (ptx_mma.h). Box and map
 * layouts: a k-major operand is one box of 128 bytes of k by bm (bn) rows; an m/n-major one
 * is a box of 64 elements by bk rows per column block. */
static void wg_producer(mg *g, LLVMValueRef base, LLVMValueRef full, LLVMValueRef empty, LLVMValueRef n_kt,
                        LLVMValueRef var)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    int S = s->stages, sbytes = cg_mma_a_bytes(s) + cg_mma_b_bytes(s), blk = s->bk * 128;
    LLVMValueRef raw = LLVMBuildPtrToInt(b, g->smem, g->e.t_i64, "");
    loop l = loop_begin(g, var, n_kt);
    LLVMValueRef t = l.i, st = LLVMBuildURem(b, t, k64(g, S), ""), round = LLVMBuildUDiv(b, t, k64(g, S), "");
    LLVMBasicBlockRef join = cg_if_begin(&g->e, LLVMBuildICmp(b, LLVMIntUGE, t, k64(g, S), ""), "reuse");
    bar_wait(g, i32_of(g, add(g, empty, mul(g, st, k64(g, 8)))),
             i32_of(g, LLVMBuildAnd(b, add(g, round, k64(g, 1)), k64(g, 1), "")));
    cg_if_end(&g->e, join);
    LLVMValueRef fb = i32_of(g, add(g, full, mul(g, st, k64(g, 8))));
    LLVMValueRef ex[2] = {fb, k32(g, sbytes)};
    asm_r(g, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", ex, 2);
    LLVMValueRef so = add(g, add(g, raw, base), mul(g, st, k64(g, sbytes)));
    LLVMValueRef k0 = i32_of(g, mul(g, t, k64(g, s->bk)));
    for (int op = 0; op < 2; op++) {
        bool kmaj = op ? s->b_kmajor : !s->a_mmajor;
        LLVMValueRef mn0 = i32_of(g, op ? g->col0 : g->row0), bs = g->p[op ? P_BBS : P_ABS];
        LLVMValueRef z = i32_of(g, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, bs, k64(g, 0), ""), k64(g, 0),
                                                   g->batch, ""));
        LLVMValueRef dst = op ? add(g, so, k64(g, cg_mma_a_bytes(s))) : so;
        int boxes = kmaj ? 1 : (op ? s->bn : s->bm) / 64;
        char text[300];
        /* the map is a kernel parameter, named as LLVM names them; the copy takes its generic
         * address */
        snprintf(text, sizeof text,
                 "{ .reg .b64 m; mov.b64 m, %s_param_%d; cvta.param.u64 m, m; "
                 "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[$0], [m, {$1, $2, $3}], [$4]; }",
                 CG_MMA_ENTRY, CG_MMA_N_PARAMS + op);
        for (int j = 0; j < boxes; j++) {
            LLVMValueRef mn = LLVMBuildAdd(b, mn0, k32(g, j * 64), "");
            LLVMValueRef a[5] = {i32_of(g, add(g, dst, k64(g, (int64_t)j * blk))), kmaj ? k0 : mn, kmaj ? mn : k0, z,
                                 fb};
            asm_r(g, text, a, 5);
        }
    }
    loop_end(g, &l);
}

/* C's tile leaves through shared memory (the stages, free once every warpgroup's last wgmma is
 * done): the accumulators go there in C's dtype, rows padded by 16 bytes so that the 8 rows a
 * store instruction touches fall in distinct banks, then each thread writes 16-byte pieces of
 * rows, one store each where a piece lies inside C and aligned, element by element at the
 * edges. Slab i's m64 x bn accumulators: warp wq of the warpgroup holds rows 16 wq .. 16 wq +
 * 15, in mma.sync's 16 x 8 order for each 8 columns. */
static void wg_store(mg *g, LLVMValueRef sa, LLVMValueRef wgi, LLVMValueRef wq, int slab_rows, int slabs)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    int esz = g->esz, pitch = s->bn * esz + 16, per = 16 / esz, cpr = s->bn / per, consumers = s->wm * 32;
    LLVMValueRef sync[2] = {k32(g, 1), k32(g, consumers)};
    call0(g, "llvm.nvvm.barrier.sync.cnt", sync, 2); /* every consumer's wgmma is done */
    LLVMValueRef raw = LLVMBuildPtrToInt(b, g->smem, g->e.t_i64, ""), tile = LLVMBuildSub(b, sa, raw, "");
    LLVMValueRef gid = LLVMBuildLShr(b, g->lane, k64(g, 2), ""), tig = LLVMBuildAnd(b, g->lane, k64(g, 3), "");
    LLVMValueRef r0 = add(g, mul(g, wgi, k64(g, slab_rows)), add(g, mul(g, wq, k64(g, 16)), gid));
    LLVMTypeRef et = LLVMTypeOf(to_c(g, LLVMConstReal(g->e.t_f32, 0))), vt = LLVMVectorType(et, 2);
    for (int i = 0; i < slabs; i++)
        for (int j = 0; j < s->bn / 8; j++)
            for (int h = 0; h < 4; h += 2) {
                int a = i * (s->bn / 2) + j * 4 + h;
                LLVMValueRef row = add(g, r0, k64(g, i * 64 + (h >> 1) * 8));
                LLVMValueRef col = add(g, mul(g, tig, k64(g, 2)), k64(g, j * 8));
                LLVMValueRef v = LLVMGetUndef(vt);
                for (int e = 0; e < 2; e++)
                    v = LLVMBuildInsertElement(b, v, to_c(g, LLVMBuildLoad2(b, g->e.t_f32, g->acc[a + e], "")),
                                               k32(g, e), "");
                LLVMValueRef st = LLVMBuildStore(b, v, sptr(g, add(g, tile, at(g, row, col, pitch))));
                LLVMSetAlignment(st, (unsigned)(2 * esz));
            }
    call0(g, "llvm.nvvm.barrier.sync.cnt", sync, 2);
    LLVMTypeRef v4 = LLVMVectorType(g->e.t_i32, 4);
    for (int it = 0; it < s->bm * cpr / consumers; it++) {
        LLVMValueRef idx = add(g, g->tid, k64(g, (int64_t)it * consumers));
        LLVMValueRef r = LLVMBuildUDiv(b, idx, k64(g, cpr), ""), c = mul(g, LLVMBuildURem(b, idx, k64(g, cpr), ""), k64(g, per));
        LLVMValueRef row = add(g, g->row0, r), col = add(g, g->col0, c);
        LLVMValueRef from = sptr(g, add(g, tile, at(g, r, c, pitch)));
        LLVMValueRef e = add(g, mul(g, g->batch, g->p[P_CBS]), add(g, mul(g, row, g->p[P_N]), col));
        LLVMValueRef addr = add(g, g->p[P_C], mul(g, e, k64(g, esz)));
        LLVMValueRef whole = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, row, g->p[P_M], ""),
                                          LLVMBuildICmp(b, LLVMIntSLE, add(g, col, k64(g, per)), g->p[P_N], ""), "");
        whole = LLVMBuildAnd(b, whole, LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, addr, k64(g, 15), ""), k64(g, 0), ""),
                             "");
        LLVMBasicBlockRef one = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "c16");
        LLVMBasicBlockRef each = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "c.each");
        LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "c.next");
        LLVMBuildCondBr(b, whole, one, each);
        LLVMPositionBuilderAtEnd(b, one);
        LLVMValueRef v = LLVMBuildLoad2(b, v4, from, "");
        LLVMSetAlignment(v, 16);
        LLVMSetAlignment(LLVMBuildStore(b, v, LLVMBuildIntToPtr(b, addr, g->t_gptr, "")), 16);
        LLVMBuildBr(b, next);
        LLVMPositionBuilderAtEnd(b, each);
        for (int q = 0; q < per; q++) {
            LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, row, g->p[P_M], ""),
                                           LLVMBuildICmp(b, LLVMIntSLT, add(g, col, k64(g, q)), g->p[P_N], ""), "");
            LLVMBasicBlockRef yes = cg_if_begin(&g->e, in, "c1");
            LLVMValueRef x = LLVMBuildLoad2(b, et, LLVMBuildGEP2(b, et, from, (LLVMValueRef[]){k64(g, q)}, 1, ""), "");
            LLVMSetAlignment(x, (unsigned)esz);
            LLVMValueRef to = LLVMBuildIntToPtr(b, add(g, addr, k64(g, (int64_t)q * esz)), g->t_gptr, "");
            LLVMSetAlignment(LLVMBuildStore(b, x, to), (unsigned)esz);
            cg_if_end(&g->e, yes);
        }
        LLVMBuildBr(b, next);
        LLVMPositionBuilderAtEnd(b, next);
    }
}

/* The operands' layouts in a stage (ptx_mma.h): a k-major operand is rows of 128 bytes of k,
 * eight rows a 1024-byte swizzle atom, so a k-step moves 32 bytes inside the rows and the next
 * 8 rows of m or n lie 1024 bytes on (sbo); an m- or n-major one is column blocks of 64
 * elements by bk rows of k, so a k-step moves 16 rows (2048 bytes), the next 8 rows of k lie
 * 1024 bytes on (sbo) and the next column block bk * 128 bytes on (lbo). */
static void build_wg(mg *g)
{
    const cg_mma_spec *s = g->s;
    LLVMBuilderRef b = g->e.b;
    int wgs = s->wm / 4, slab_rows = s->bm / wgs, slabs = slab_rows / 64, S = s->stages;
    int sbytes = cg_mma_a_bytes(s) + cg_mma_b_bytes(s), blk = s->bk * 128;
    begin(g);
    LLVMValueRef var = LLVMBuildAlloca(b, g->e.t_i64, "");
    LLVMValueRef warp = LLVMBuildLShr(b, g->tid, k64(g, 5), "");
    LLVMValueRef n_kt = LLVMBuildUDiv(b, add(g, g->p[P_K], k64(g, s->bk - 1)), k64(g, s->bk), "");
    LLVMValueRef raw = LLVMBuildPtrToInt(b, g->smem, g->e.t_i64, "");
    LLVMValueRef base = LLVMBuildSub(b, LLVMBuildAnd(b, add(g, raw, k64(g, 1023)), k64(g, -1024), ""), raw, "");
    /* the mbarriers after the stages: full[S] (the copies landed), empty[S] (every consumer
     * warp is done with the tile) */
    LLVMValueRef full = add(g, add(g, raw, base), k64(g, (int64_t)S * sbytes)), empty = add(g, full, k64(g, 8 * S));
    LLVMBasicBlockRef join = cg_if_begin(&g->e, LLVMBuildICmp(b, LLVMIntEQ, g->tid, k64(g, 0), ""), "init");
    for (int i = 0; i < S; i++) {
        LLVMValueRef f[2] = {i32_of(g, add(g, full, k64(g, 8 * i))), k32(g, 1)};
        LLVMValueRef e[2] = {i32_of(g, add(g, empty, k64(g, 8 * i))), k32(g, s->wm)};
        asm_r(g, "mbarrier.init.shared::cta.b64 [$0], $1;", f, 2);
        asm_r(g, "mbarrier.init.shared::cta.b64 [$0], $1;", e, 2);
    }
    asm_plain(g, "fence.mbarrier_init.release.cluster;");
    cg_if_end(&g->e, join);
    call0(g, "llvm.nvvm.barrier0", NULL, 0);

    LLVMBasicBlockRef cons = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "consumer");
    LLVMBasicBlockRef prod = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "producer");
    LLVMBasicBlockRef out = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "out");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, warp, k64(g, s->wm), ""), cons, prod);
    LLVMPositionBuilderAtEnd(b, prod);
    join = cg_if_begin(&g->e, LLVMBuildICmp(b, LLVMIntEQ, g->tid, k64(g, (int64_t)s->wm * 32), ""), "issue");
    wg_producer(g, base, full, empty, n_kt, var);
    cg_if_end(&g->e, join);
    LLVMBuildBr(b, out);

    LLVMPositionBuilderAtEnd(b, cons);
    LLVMValueRef wgi = LLVMBuildLShr(b, warp, k64(g, 2), ""), wq = LLVMBuildAnd(b, warp, k64(g, 3), "");
    LLVMValueRef da[4], sa = add(g, raw, base); /* stage 0's descriptors */
    for (int i = 0; i < slabs; i++) {
        LLVMValueRef row = add(g, mul(g, wgi, k64(g, slab_rows)), k64(g, i * 64));
        LLVMValueRef off = s->a_mmajor ? mul(g, LLVMBuildLShr(b, row, k64(g, 6), ""), k64(g, blk))
                                       : mul(g, row, k64(g, 128));
        da[i] = wg_desc(g, add(g, sa, off), s->a_mmajor ? blk : 16, 1024);
    }
    LLVMValueRef db = wg_desc(g, add(g, sa, k64(g, cg_mma_a_bytes(s))), s->b_kmajor ? 16 : blk, 1024);
    int astep = s->a_mmajor ? 2048 : 32, bstep = s->b_kmajor ? 32 : 2048;
    loop l = loop_begin(g, var, n_kt);
    LLVMValueRef kt = l.i, st = LLVMBuildURem(b, kt, k64(g, S), "");
    bar_wait(g, i32_of(g, add(g, full, mul(g, st, k64(g, 8)))),
             i32_of(g, LLVMBuildAnd(b, LLVMBuildUDiv(b, kt, k64(g, S), ""), k64(g, 1), "")));
    LLVMValueRef so = mul(g, st, k64(g, sbytes / 16));
    asm_plain(g, "wgmma.fence.sync.aligned;");
    for (int ks = 0; ks < s->bk / g->kstep; ks++)
        for (int i = 0; i < slabs; i++)
            wg_mma(g, i, add(g, da[i], add(g, so, k64(g, ks * astep / 16))),
                   add(g, db, add(g, so, k64(g, ks * bstep / 16))));
    asm_plain(g, "wgmma.commit_group.sync.aligned;");
    wg_wait(g, 1);
    /* this warpgroup's wgmma of tile kt - 1 are done: its warps release that stage */
    LLVMValueRef rel = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntUGT, kt, k64(g, 0), ""),
                                    LLVMBuildICmp(b, LLVMIntEQ, g->lane, k64(g, 0), ""), "");
    join = cg_if_begin(&g->e, rel, "release");
    LLVMValueRef prev = LLVMBuildURem(b, add(g, kt, k64(g, S - 1)), k64(g, S), "");
    LLVMValueRef e = i32_of(g, add(g, empty, mul(g, prev, k64(g, 8))));
    asm_r(g, "mbarrier.arrive.shared::cta.b64 _, [$0];", &e, 1);
    cg_if_end(&g->e, join);
    loop_end(g, &l);
    wg_wait(g, 0);

    wg_store(g, sa, wgi, wq, slab_rows, slabs);
    LLVMBuildBr(b, out);
    LLVMPositionBuilderAtEnd(b, out);
    LLVMBuildRetVoid(b);
}

/* The transpose entry (ptx_mma.h): 32 x 32 tiles through shared memory, rows padded by one
 * word so that both the reads along a row and along a column of the tile hit distinct banks. */
static void build_transpose(mg *g)
{
    LLVMBuilderRef b = g->e.b;
    LLVMTypeRef pt[CG_MMA_T_N_PARAMS];
    for (int i = 0; i < CG_MMA_T_N_PARAMS; i++)
        pt[i] = g->e.t_i64;
    g->fn = LLVMAddFunction(g->e.mod, CG_MMA_TRANSPOSE_ENTRY,
                            LLVMFunctionType(g->e.t_void, pt, CG_MMA_T_N_PARAMS, 0));
    LLVMSetFunctionCallConv(g->fn, LLVMPTXKernelCallConv);
    annotate1(g, "maxntidx", 32);
    annotate1(g, "maxntidy", 8);
    LLVMValueRef p[CG_MMA_T_N_PARAMS];
    for (int i = 0; i < CG_MMA_T_N_PARAMS; i++)
        p[i] = LLVMGetParam(g->fn, (unsigned)i);
    LLVMTypeRef tt = LLVMArrayType2(g->e.t_f32, 32 * 33);
    LLVMValueRef tile = LLVMAddGlobalInAddressSpace(g->e.mod, tt, "burnc_mma_t_tile", 3);
    LLVMSetLinkage(tile, LLVMInternalLinkage);
    LLVMSetInitializer(tile, LLVMGetUndef(tt));
    LLVMSetAlignment(tile, 4);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "entry"));
    cg_ptx_grid_dependency(g->e.ctx, b, g->s->sm);
    LLVMValueRef tx = sreg(g, "tid.x"), ty = sreg(g, "tid.y"), z = sreg(g, "ctaid.z");
    LLVMValueRef x0 = mul(g, sreg(g, "ctaid.x"), k64(g, 32)), y0 = mul(g, sreg(g, "ctaid.y"), k64(g, 32));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) {
            LLVMValueRef u = add(g, ty, k64(g, i * 8)); /* the tile row this thread visits */
            /* pass 0 reads source row y0 + u at column x0 + tx; pass 1 writes destination row
             * x0 + u (a source column) at column y0 + tx (a source row) */
            LLVMValueRef r = pass ? add(g, y0, tx) : add(g, y0, u), c = pass ? add(g, x0, u) : add(g, x0, tx);
            LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, r, p[2], ""),
                                           LLVMBuildICmp(b, LLVMIntSLT, c, p[3], ""), "");
            LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "t");
            LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(g->e.ctx, g->fn, "t.next");
            LLVMBuildCondBr(b, in, yes, next);
            LLVMPositionBuilderAtEnd(b, yes);
            LLVMValueRef slot = pass ? add(g, mul(g, tx, k64(g, 33)), u) : add(g, mul(g, u, k64(g, 33)), tx);
            LLVMValueRef sp = LLVMBuildGEP2(b, g->e.t_f32, tile, &slot, 1, "");
            LLVMValueRef e = pass ? add(g, mul(g, z, p[7]), add(g, mul(g, c, p[6]), r))
                                  : add(g, mul(g, z, p[5]), add(g, mul(g, r, p[4]), c));
            LLVMValueRef gp = LLVMBuildIntToPtr(b, add(g, p[pass ? 1 : 0], mul(g, e, k64(g, 4))), g->t_gptr, "");
            LLVMValueRef v = LLVMBuildLoad2(b, g->e.t_f32, pass ? sp : gp, "");
            LLVMSetAlignment(v, 4);
            LLVMSetAlignment(LLVMBuildStore(b, v, pass ? gp : sp), 4);
            LLVMBuildBr(b, next);
            LLVMPositionBuilderAtEnd(b, next);
        }
        if (!pass)
            call0(g, "llvm.nvvm.barrier0", NULL, 0);
    }
    LLVMBuildRetVoid(b);
}

/* ---- PTX ------------------------------------------------------------------------------------ */

bool cg_llvm_compile_mma_ptx(const cg_mma_spec *s, char **ptx, size_t *ptx_size, char *err, size_t cap);
bool cg_llvm_compile_mma_ptx(const cg_mma_spec *s, char **ptx, size_t *ptx_size, char *err, size_t cap)
{
    char why[200];
    *ptx = NULL;
    *ptx_size = 0;
    if (!cg_mma_spec_valid(s, why, sizeof why)) /* an mma below sm_80 would abort LLVM */
        return cg_failf(err, cap, "compile_mma_ptx: %s", why);
    /* wgmma needs sm_90a */
    LLVMTargetMachineRef tm = cg_nvptx_tm(s->sm, s->wg, "compile_mma_ptx", err, cap);
    if (!tm)
        return false;
    mg g = {.s = s, .esz = cg_mma_elem_bytes(s), .kstep = s->type == CG_MMA_TF32 ? 8 : 16,
            .mi = s->bm / s->wm / 16, .ni = s->bn / s->wn / 8, .threads = cg_mma_threads(s)};
    g.n_acc = s->wg ? s->bm / (s->wm / 4) / 64 * (s->bn / 2) : g.mi * g.ni * 4;
    cg_module_begin(&g.e, tm, CG_NVPTX_TRIPLE, "burnc_mma");
    g.t_gptr = LLVMPointerTypeInContext(g.e.ctx, 1);
    g.t_sptr = LLVMPointerTypeInContext(g.e.ctx, 3);
    g.t_h2 = LLVMVectorType(LLVMHalfTypeInContext(g.e.ctx), 2);
    if (s->wg)
        build_wg(&g);
    else
        build(&g);
    if (s->wg && s->type == CG_MMA_TF32)
        build_transpose(&g);
    bool ok = cg_emit_module(g.e.mod, tm, "default<O3>", false, "compile_mma_ptx", ptx, ptx_size, err, cap);
    cg_module_end(&g.e, tm);
    return ok;
}
