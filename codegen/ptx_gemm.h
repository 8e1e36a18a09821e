/* The CUDA SIMT matmul kernel: what codegen/ptx_gemm.c (in the LLVM module) generates and what
 * runtime/cuda/gemm.c launches. Both sides include this header, so the parameter words and
 * the layout rules are written once.
 *
 * One entry, CG_GEMM_ENTRY, block (BM/TM)*(BN/TN) threads, grid (ceil(N/BN), ceil(M/BM),
 * batches). C[b] = A[b] @ B[b] with every C element one fma chain over k = 0..K-1 in increasing
 * order from +0.0 in f32 (f32, f16, bf16 operands: the halves widened exactly) or f64, rounded
 * once to the dtype at the store: the cpu device's chain, so equal to it bitwise. Out-of-range
 * tile elements are zeros: they only add fma(0, 0, c) = c steps (c is never -0.0 in a chain
 * that starts from +0.0) or reach discarded outputs.
 *
 * An epilogue (a kir_kernel the fusion pass marked, element-wise over C's elements, reading C
 * through one input slot at C's own flat position) runs on the values before they are stored:
 * its loads of that slot take the product (rounded to the dtype), its other slots are read and
 * its outputs written through their own strides. cg_ptx_gemm_epilogue_ok says which kernels the
 * generator takes; others run apart. */
#ifndef BURNC_PTX_GEMM_H
#define BURNC_PTX_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "kernel.h"
#include "ptx.h"

#define CG_GEMM_ENTRY "burnc_gemm"

/* How a tile of an operand is read from global memory. VEC_*: vectors of cg_ptx_gemm_vec(dt)
 * elements along the contiguous axis (that stride is 1, the other strides, the base and the
 * extent along it are multiples of the vector); SCALAR_*: one element at a time through the
 * strides, in the order that follows the smaller stride. K: along k; MN: along m (A) or n (B). */
enum { CG_GEMM_SCALAR_K, CG_GEMM_SCALAR_MN, CG_GEMM_VEC_K, CG_GEMM_VEC_MN };

typedef struct cg_ptx_gemm_spec {
    int sm;                /* compute capability x 10 + minor */
    burnc_dtype_t dt;      /* A, B and C: f32, f64, f16 or bf16 */
    int bm, bn, bk, tm, tn; /* block tile, k-tile depth, per-thread register tile */
    int min_blocks;        /* blocks per SM ptxas budgets registers for (0: 2 up to 256 threads) */
    bool pipe;             /* fragments read a k-step ahead, across the k-tile's barrier */
    bool async_mn;         /* f32 on sm_80+: operands read along m/n (VEC_MN) go global -> shared
                            * by cp.async, 16 bytes a copy, without staging registers */
    bool snake;            /* odd rows of the register tile run their fmas right to left, so each
                            * row change reuses the last B operand (the chains are unchanged) */
    int a_mode, b_mode;    /* CG_GEMM_* */
    const kir_kernel *epi; /* fused epilogue, or NULL */
    int epi_c_slot;        /* its input slot that reads the product */
    /* Tests: instead of PTX, an x86-64 object (for cg_object_load, the entry as its rows
     * function) that runs ONE GPU thread per call, void entry(uint64_t *words): the thread and
     * block indices, the barrier and the block's shared memory come from CG_GEMM_HOST_* words,
     * so a test runs a block as threads that share a barrier and check the kernel's logic
     * without a GPU. */
    bool host;
} cg_ptx_gemm_spec;

/* The tile variants autotune chooses among (family "cuda.matmul"): name, BM, BN, BK, TM, TN,
 * blocks per SM for the register budget (0: the default), pipelined, cp.async along m/n,
 * snake order (cg_ptx_gemm_spec says what each does). */
typedef struct cg_ptx_gemm_tile {
    const char *name;
    int bm, bn, bk, tm, tn, min_blocks;
    bool pipe, async_mn, snake;
} cg_ptx_gemm_tile;
enum { CG_PTX_GEMM_N_TILES = 11 };
static const cg_ptx_gemm_tile CG_PTX_GEMM_TILES[CG_PTX_GEMM_N_TILES] = {
    {"128x128x8 t8x8", 128, 128, 8, 8, 8, 0, false, false, false},
    {"128x128x16 t8x8", 128, 128, 16, 8, 8, 0, false, false, false},
    {"128x64x16 t8x4", 128, 64, 16, 8, 4, 0, false, false, false},
    {"64x128x16 t4x8", 64, 128, 16, 4, 8, 0, false, false, false},
    {"64x64x16 t4x4", 64, 64, 16, 4, 4, 0, false, false, false},
    {"32x32x8 t4x4", 32, 32, 8, 4, 4, 0, false, false, false},
    /* 128x128x8 with every register it wants (about 170: one block per SM, no spills) */
    {"128x128x8 t8x8 occ1", 128, 128, 8, 8, 8, 1, false, false, false},
    /* 16x8 a thread, 128 threads, two blocks an SM (about 240 registers): the shape of cuBLAS's
     * 128x128 f32 kernel; 46 TFLOP/s at 4096^3 on the H200 against 43 for 8x8 (with BK 16: 31) */
    {"128x128x8 t16x8", 128, 128, 8, 16, 8, 2, false, false, false},
    /* Pipelined (ptx_gemm.c), on the H200: tile 7's order at 4096 x 1024 x 1024 with both
     * operands read along k, 214 -> 204 us (4096^3: 1.5% slower), and in snake order 205 ->
     * 198 us (tile 7 and 4096^3 lost 1-2% in that order); 64x64x16 at 8x4 for
     * 1024 x 1024 x 4096 (a weight gradient), 234 us against 252 for tile 3, and with both
     * operands (read along m and n there) copied by cp.async 228 -> 214 us (cp.async of
     * operands read along k, 4 bytes a copy into k-major rows, lost 10-18%) */
    {"128x128x8 t16x8 pipelined snake", 128, 128, 8, 16, 8, 2, true, false, true},
    {"64x64x16 t8x4 pipelined cp.async", 64, 64, 16, 8, 4, 3, true, true, false},
    /* tile 7 with operands read along m/n copied by cp.async: where both are (a weight's
     * gradient by row chunks, 4 x 1024^3 batched) 194.9 / 196.1 us against 198.3 / 203.2; where
     * one is (dY @ W), as tile 7; pipelined as well, 198-199 */
    {"128x128x8 t16x8 cp.async", 128, 128, 8, 16, 8, 2, false, true, false},
};

/* The spec of tile t for compute capability sm, dtype dt and operand modes am, bm. */
static inline cg_ptx_gemm_spec cg_ptx_gemm_tile_spec(int t, int sm, burnc_dtype_t dt, int am, int bm)
{
    const cg_ptx_gemm_tile *x = &CG_PTX_GEMM_TILES[t];
    return (cg_ptx_gemm_spec){.sm = sm, .dt = dt, .bm = x->bm, .bn = x->bn, .bk = x->bk, .tm = x->tm, .tn = x->tn,
                              .min_blocks = x->min_blocks, .pipe = x->pipe, .async_mn = x->async_mn,
                              .snake = x->snake, .a_mode = am, .b_mode = bm};
}

/* Parameter words (8 bytes each), one byval block like the fused kernels'. Addresses already
 * include the operands' offsets; strides in elements. After CG_GEMM_W_EPI come the epilogue
 * kernel's words in cg_ptx_params_layout's order (its C slot's address word is unused). */
enum {
    CG_GEMM_W_A, CG_GEMM_W_B, CG_GEMM_W_C,
    CG_GEMM_W_M, CG_GEMM_W_N, CG_GEMM_W_K,
    CG_GEMM_W_A_BS, CG_GEMM_W_A_RS, CG_GEMM_W_A_KS,
    CG_GEMM_W_B_BS, CG_GEMM_W_B_KS, CG_GEMM_W_B_CS,
    CG_GEMM_W_C_BS,
    CG_GEMM_W_FLAGS,  /* CG_GEMM_F_* */
    CG_GEMM_W_BATCH0, /* epilogue: the batch index of blockIdx.z == 0 (launches split batches) */
    CG_GEMM_W_QLAST,  /* epilogue: its last extent / N (the last axis spans whole rows of C) */
    CG_GEMM_W_EPI
};
/* Host mode (cg_ptx_gemm_spec.host): these words follow the epilogue's (or CG_GEMM_W_EPI when
 * there is none). BARRIER is a void (*)(void *arg) called with BARRIER_ARG; SMEM the address of
 * cg_ptx_gemm_shared_bytes bytes shared by the block's threads. */
enum { CG_GEMM_HOST_TID, CG_GEMM_HOST_CTAID_X, CG_GEMM_HOST_CTAID_Y, CG_GEMM_HOST_CTAID_Z, CG_GEMM_HOST_BARRIER,
       CG_GEMM_HOST_BARRIER_ARG, CG_GEMM_HOST_SMEM, CG_GEMM_HOST_WORDS };
enum {
    CG_GEMM_F_STORE_C = 1, /* write C itself (off when an epilogue output takes C's buffer) */
    CG_GEMM_F_C_VEC = 2,   /* N is a multiple of the vector: C rows may be stored as vectors */
};

/* Vector width, in elements, of the vectorized global loads and C stores. */
static inline int cg_ptx_gemm_vec(burnc_dtype_t dt) { return dt == BURNC_DTYPE_F64 ? 2 : 4; }

static inline int cg_ptx_gemm_threads(const cg_ptx_gemm_spec *s) { return (s->bm / s->tm) * (s->bn / s->tn); }

/* Shared memory of one launch in bytes: two k-tiles of A (k-major, BM + pad per k) and of B
 * (BN + pad per k), in the compute type; with an epilogue, at least a slab of C's tile (the
 * BM / (TM / vector) rows one register group of the threads covers, BN + pad each), which the
 * stores go through. Dynamic shared memory: more than 48 KiB needs the function's limit
 * raised. */
static inline int cg_ptx_gemm_pad(burnc_dtype_t dt) { return dt == BURNC_DTYPE_F64 ? 2 : 4; }
static inline int cg_ptx_gemm_shared_bytes(const cg_ptx_gemm_spec *s)
{
    int es = s->dt == BURNC_DTYPE_F64 ? 8 : 4, pad = cg_ptx_gemm_pad(s->dt);
    int buffers = 2 * s->bk * (s->bm + pad + s->bn + pad) * es;
    int slab = s->epi && s->tm > 0 ? s->bm * cg_ptx_gemm_vec(s->dt) / s->tm * (s->bn + pad) * es : 0;
    return buffers > slab ? buffers : slab;
}

/* Whether the tile shape is one the generator accepts: every thread loads whole vectors and
 * the same number of them, register tiles are whole vectors and fit the registers (128
 * accumulators at about 240 registers for 16x8, 32 for f64, which take two registers each). */
static inline bool cg_ptx_gemm_shape_ok(const cg_ptx_gemm_spec *s)
{
    int v = cg_ptx_gemm_vec(s->dt), t = s->tm > 0 && s->tn > 0 ? cg_ptx_gemm_threads(s) : 0;
    return s->bm > 0 && s->bn > 0 && s->bk > 0 && s->tm > 0 && s->tn > 0 && s->bm % s->tm == 0 &&
           s->bn % s->tn == 0 && s->tm % v == 0 && s->tn % v == 0 && s->bk % v == 0 && t >= 32 && t <= 1024 &&
           t % 32 == 0 && (s->bm * s->bk / v) % t == 0 && (s->bn * s->bk / v) % t == 0 &&
           s->tm * s->tn <= (s->dt == BURNC_DTYPE_F64 ? 32 : 128);
}

/* Whether kernel k can be fused as an epilogue reading the product through input slot c:
 * element-wise, and no instruction the generator does not lower at the store (float
 * remainder, which the element-wise generator expands in its own blocks). The runtime also
 * checks the launch's layout (C read at its own flat positions, the last axis spans whole
 * rows, no operand written). */
static inline bool cg_ptx_gemm_epilogue_ok(const kir_kernel *k, int c)
{
    if (!k || k->n_stages || k->n_outer != k->rank || k->rank < 1 || c < 0 || c >= k->n_inputs)
        return false;
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        if (in->op == KIR_REDUCED || (in->op == KIR_REM && (in->type == KIR_F32 || in->type == KIR_F64)))
            return false;
    }
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row)
            return false;
    return true;
}

#endif
