/* The tensor-core matmul kernels (codegen/ptx_mma.c, in the burnc-llvm module) and what the
 * CUDA runtime (runtime/cuda/mma.c, no LLVM) needs to launch them: both sides derive the
 * kernel's shape from one cg_mma_spec, so they agree without passing anything else.
 *
 * One kernel computes C[b] = A[b] @ B[b] (A m x k, B k x n, C dense row-major m x n) with
 * mma.sync: a block owns a bm x bn tile of C, its warps a wm x wn grid of it; K goes in steps of
 * bk through `stages` shared-memory buffers filled by cp.async (16-byte copies, zero-filled past
 * the matrix edges), so any m, n, k works as long as rows of A and B start 16-byte aligned.
 * Fragments come from shared memory through ldmatrix (its .trans form for an operand stored the
 * other way round) for f16/bf16; for tf32 through ldmatrix where the operand's k is contiguous,
 * else plain 32-bit loads, then cvt.rna.tf32. With `pipe`, each k-step's mma overlap the
 * fragment loads of the next (across the barrier too). The f32 accumulators are rounded once
 * to C's dtype at the store, two neighbours per store where aligned.
 *
 * Parameters (each an i64, in this order): a, b, c (device addresses), m, n, k, a_bs, a_ld,
 * b_bs, b_ld, c_bs; a_ld is A's stride between rows of its stored layout (a_rs when k is
 * contiguous, a_ks when m is), b_ld likewise (b_ks when n is contiguous, b_cs when k is).
 * Grid: (ceil(n / bn), ceil(m / bm), batch); block: cg_mma_threads; dynamic shared memory:
 * cg_mma_smem_bytes. On sm_90 the warpgroup kernel (below) replaces mma.sync. */
#ifndef BURNC_PTX_MMA_H
#define BURNC_PTX_MMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cg_mma_type { CG_MMA_F16, CG_MMA_BF16, CG_MMA_TF32 };

typedef struct cg_mma_spec {
    int sm;            /* compute capability x 10 + minor; 80 or more */
    int type;          /* cg_mma_type: operands and C f16, bf16, or f32 through tf32 */
    int bm, bn, bk;    /* block tile; bk in elements (32 or 64 for 16-bit types, 16 for tf32) */
    int wm, wn;        /* warps along m and n: warp tile (bm / wm) x (bn / wn) */
    int stages;        /* shared-memory buffers, 2..5 */
    int min_blocks;    /* blocks per SM the registers must allow (0 or 1: no bound; at most 4) */
    bool pipe;         /* load the next k-step's fragments during this one's mma (more registers) */
    bool a_mmajor;     /* A stored with m contiguous (a_rs == 1), else k contiguous */
    bool b_kmajor;     /* B stored with k contiguous (b_ks == 1), else n contiguous */
    bool wg;           /* Hopper's warpgroup kernel (below), else mma.sync */
} cg_mma_spec;

/* The warpgroup kernel (wg, sm_90a only): wgmma.mma_async with both operands in shared memory,
 * laid out in the 128-byte swizzle its descriptors name. wm counts consumer warps along m in
 * groups of four (a warpgroup owns bm / (wm / 4) rows, in slabs of 64, each slab one m64 x bn
 * wgmma per k-step), wn is 1; bk holds 128 bytes of k, so a stored row along k is one swizzle
 * row. One more warp produces: its lane 0 fills the stages with the bulk tensor copy engine
 * (cp.async.bulk.tensor, 3-d tile mode, zeros past every edge), completing on the stage's
 * "full" mbarrier; each consumer warp waits for it, issues its wgmma, keeps one K tile of them
 * in flight (wgmma.wait_group 1) and then releases the stage of the tile before on its "empty"
 * mbarrier, which the producer waits for before refilling it. No block barrier in the K loop.
 * After it C's tile goes through shared memory and out in 16-byte pieces.
 * Two more parameters follow the eleven i64: the tensor maps of A and B (CUtensorMap, 128
 * bytes, 64-aligned), encoded by the runtime in the box layouts ptx_mma.c's producer reads: a
 * k-contiguous operand as one box of 128 bytes of k by bm (bn) rows; an m/n-contiguous one as
 * boxes of 64 elements by bk rows, one per 64 columns (dims: inner, outer, batch; a batch
 * stride of 0 is read at batch 0). An operand stored with m or n contiguous is read transposed
 * by the tensor cores (imm-trans) for f16/bf16; wgmma has no transposed tf32, so the runtime
 * first transposes such an operand with the module's second entry, CG_MMA_TRANSPOSE_ENTRY. The
 * tensor cores read tf32 operands as they are, dropping the 13 low mantissa bits (mma.sync
 * kernels round them with cvt.rna). */
#define CG_MMA_TRANSPOSE_ENTRY "burnc_mma_t"
enum { CG_MMA_T_N_PARAMS = 8 };
/* The transpose: dst[b][c][r] = src[b][r][c] for r < rows, c < cols, each an i64 in this order:
 * src, dst, rows, cols, src_ld, src_bs, dst_ld, dst_bs (4-byte elements). Grid (ceil(cols/32),
 * ceil(rows/32), batch), block 32 x 8. */

enum { CG_MMA_N_PARAMS = 11 };
#define CG_MMA_ENTRY "burnc_mma"

static inline int cg_mma_elem_bytes(const cg_mma_spec *s) { return s->type == CG_MMA_TF32 ? 4 : 2; }
static inline int cg_mma_threads(const cg_mma_spec *s) { return s->wm * s->wn * 32 + (s->wg ? 32 : 0); }

/* The shared-memory pitch (bytes) of a stored tile row of `cols` elements. Padding keeps the
 * 8 rows one ldmatrix (or one warp's 32-bit fragment loads) reads in distinct banks: 16 bytes
 * when the row's direction is k (or for ldmatrix), 32 bytes for tf32 rows along m or n, where
 * the fragment reads 4 rows of 8 consecutive words. */
static inline int cg_mma_pitch(const cg_mma_spec *s, int cols, bool k_contiguous)
{
    int pad = s->type == CG_MMA_TF32 && !k_contiguous ? 32 : 16;
    return cols * cg_mma_elem_bytes(s) + pad;
}

/* Bytes of one stage's A and B tiles. */
static inline int cg_mma_a_bytes(const cg_mma_spec *s)
{
    if (s->wg)
        return s->bm * s->bk * cg_mma_elem_bytes(s);
    return s->a_mmajor ? s->bk * cg_mma_pitch(s, s->bm, false) : s->bm * cg_mma_pitch(s, s->bk, true);
}
static inline int cg_mma_b_bytes(const cg_mma_spec *s)
{
    if (s->wg)
        return s->bn * s->bk * cg_mma_elem_bytes(s);
    return s->b_kmajor ? s->bn * cg_mma_pitch(s, s->bk, true) : s->bk * cg_mma_pitch(s, s->bn, false);
}
static inline uint32_t cg_mma_smem_bytes(const cg_mma_spec *s)
{
    /* the swizzle repeats every 1024 bytes of address: wg stages start there (1 KB of slack),
     * their two mbarriers each after them */
    return (uint32_t)(s->stages * (cg_mma_a_bytes(s) + cg_mma_b_bytes(s)) + (s->wg ? 1024 + 16 * s->stages : 0));
}

/* Whether the generator accepts s (else the reason in why): tile sizes that split evenly into
 * warps, mma shapes and 16-byte copies, at most 8 warps, and registers that fit. */
static inline bool cg_mma_spec_valid(const cg_mma_spec *s, char *why, size_t cap)
{
    const char *bad = NULL;
    int threads = s->wm * s->wn * 32, esz = cg_mma_elem_bytes(s), kstep = s->type == CG_MMA_TF32 ? 8 : 16;
    if (s->sm < 80)
        bad = "mma.sync with ldmatrix and cp.async needs sm_80 or newer";
    else if (s->type < CG_MMA_F16 || s->type > CG_MMA_TF32)
        bad = "unknown operand type";
    else if (s->wm < 1 || s->wn < 1 || s->wm * s->wn > 8)
        bad = "1 to 8 warps";
    else if (s->bm % (16 * s->wm) || s->bn % (16 * s->wn) || s->bk % kstep || s->bk < 2 * kstep)
        bad = "warp tiles must be multiples of 16 x 16 and bk of two mma k-steps";
    else if ((s->bm / s->wm / 16) * (s->bn / s->wn / 8) > 64)
        bad = "the warp tile needs more accumulator registers than fit";
    else if (s->stages < 2 || s->stages > (s->wg ? 6 : 5))
        bad = "2 to 5 stages";
    else if (s->min_blocks < 0 || s->min_blocks > 4)
        bad = "0 to 4 blocks per SM";
    else if (!s->wg && ((s->bm * s->bk * esz / 16) % threads || (s->bn * s->bk * esz / 16) % threads))
        bad = "a stage's 16-byte copies do not split evenly over the threads";
    else if (s->wg && s->sm != 90)
        bad = "wgmma is sm_90a's: a compute capability of exactly 9.0";
    else if (s->wg && (s->wn != 1 || s->wm % 4 || s->bm % (16 * s->wm) || s->bk * esz != 128 || s->bn % 64 ||
                       s->bn > 256 || s->stages < 3))
        bad = "warpgroup tiles: whole warpgroups along m in slabs of 64 rows, bn a multiple of 64 up to 256, "
              "128 bytes of k, 3 or more stages";
    else if (s->wg && s->type == CG_MMA_TF32 && (s->a_mmajor || !s->b_kmajor))
        bad = "wgmma reads tf32 operands only with k contiguous";
    else if (s->wg && s->bm * (s->bn * esz + 16) > s->stages * s->bk * (s->bm + s->bn) * esz)
        bad = "C's tile does not fit in the stages' shared memory";
    else if (s->wg && (s->bm / (s->wm / 4) / 64) * (s->bn / 2) > 128)
        bad = "the warpgroup's accumulators need more registers than fit";
    if (bad && why && cap)
        snprintf(why, cap, "mma spec %dx%dx%d, %dx%d warps, %d stages: %s", s->bm, s->bn, s->bk, s->wm, s->wn,
                 s->stages, bad);
    return !bad;
}

/* The tile variants the runtime chooses from (BURNC_CUDA_MMA_TILE=N forces one; tests
 * assemble and run them all): bk is given for 16-bit types; tf32 takes 16 (its fragments are
 * converted one by one, and ptxas hoists the loads of every k-step of a stage: more k-steps
 * would spill). 64 x 64 warp tiles read the least shared memory per mma (two ldmatrix.x4 per
 * four mma); a block of 4 such warps fits twice on an SM, so that one block's barrier and
 * copies overlap the other's mma; bk 64 halves the barriers per FLOP. Tiles 8 to 11 are the
 * warpgroup kernel's (sm_90): on the H200, 128 x 256 (tile 8) measured 697 and 721 TFLOP/s for
 * bf16 at 4096^3 and 8192^3, against 690 and 715 for 256 x 128 (tile 10) and 457 and 503 for
 * 128 x 128 (tile 9, before C went out through shared memory). */
typedef struct cg_mma_tile {
    int bm, bn, bk, wm, wn, stages, min_blocks;
    bool pipe; /* on sm_90 for f16/bf16 only: elsewhere ptxas spills (tf32's single loads, sm_80) */
    bool wg;   /* the warpgroup kernel: sm_90 only; bk is set by the type (128 bytes) */
} cg_mma_tile;
static const cg_mma_tile CG_MMA_TILES[] = {
    {128, 128, 32, 2, 4, 4, 0, true, false}, /* 0: 8 warps of 64 x 32 */
    {128, 256, 32, 2, 4, 3, 1, true, false}, /* 1: 8 warps of 64 x 64 */
    {64, 64, 32, 2, 2, 4, 0, true, false},   /* 2: small problems: more blocks than SMs */
    {256, 128, 32, 4, 2, 3, 1, true, false}, /* 3: 8 warps of 64 x 64, tall */
    {128, 128, 32, 2, 2, 4, 2, true, false}, /* 4: 4 warps of 64 x 64, two blocks per SM */
    {128, 256, 64, 2, 4, 3, 1, false, false}, /* 5: tile 1 with bk 64 */
    {128, 256, 32, 2, 4, 4, 1, true, false}, /* 6: tile 1 with 4 stages */
    {256, 128, 64, 4, 2, 3, 1, false, false}, /* 7: tile 3 with bk 64 */
    {128, 256, 0, 8, 1, 4, 1, false, true},  /* 8: 2 warpgroups of 64 x 256 */
    {128, 128, 0, 8, 1, 5, 1, false, true},  /* 9: 2 warpgroups of 64 x 128: fewer tiles than SMs */
    {256, 128, 0, 8, 1, 4, 1, false, true},  /* 10: 2 warpgroups of 128 x 128 (two slabs each) */
    {64, 128, 0, 4, 1, 4, 2, false, true},   /* 11: 1 warpgroup, two blocks per SM: small problems */
};
enum { CG_MMA_N_TILES = sizeof CG_MMA_TILES / sizeof CG_MMA_TILES[0] };

/* Whether tile runs on sm (warpgroup tiles on sm_90 only). */
static inline bool cg_mma_tile_ok(int sm, int tile) { return !CG_MMA_TILES[tile].wg || sm == 90; }

static inline cg_mma_spec cg_mma_variant(int sm, int type, int tile, bool a_mmajor, bool b_kmajor)
{
    const cg_mma_tile *t = &CG_MMA_TILES[tile];
    int bk = t->wg ? (type == CG_MMA_TF32 ? 32 : 64) : type == CG_MMA_TF32 ? 16 : t->bk;
    cg_mma_spec s = {.sm = sm, .type = type, .bm = t->bm, .bn = t->bn, .bk = bk, .wm = t->wm, .wn = t->wn,
                     .stages = t->stages, .min_blocks = t->min_blocks,
                     .pipe = t->pipe && type != CG_MMA_TF32 && sm >= 90, .a_mmajor = a_mmajor, .b_kmajor = b_kmajor,
                     .wg = t->wg};
    return s;
}

#endif
