/* The contract between the CUDA runtime (runtime/cuda/) and the PTX code generator.
 *
 * Two halves:
 *  - codegen/llvm_ptx.c, in the LLVM module (burnc-llvm.so, reached through cg_llvm_api's
 *    compile_ptx), lowers one kir_kernel to PTX text holding every entry the kernel may need;
 *  - codegen/ptx_plan.c, in libburnc (no LLVM: a warm process loads cached cubins and still
 *    has to plan its launches), turns one launch of that kernel (kir_args) into an ordered
 *    list of CUDA launches: entry, grid, block, dynamic shared memory, and the packed
 *    parameter block.
 * Both derive everything from the kernel's structure and the options, so the PTX and the plan
 * agree without passing anything else between them.
 *
 * Every entry takes exactly one parameter: a byval struct of 8-byte words whose layout is
 * cg_ptx_params_layout's (device addresses, extents, offsets, strides, scalars, then the
 * words of the launch itself). The runtime passes it as CU_LAUNCH_PARAM_BUFFER_POINTER.
 *
 * Numerics (DESIGN.md): every op rounds (add.rn/mul.rn/... only; no contraction, fma only for
 * KIR_FMA), no .ftz, reductions in kernel.h's order, so element-wise results equal the cpu
 * device's bitwise and reductions equal kir_eval's.
 *
 * Changes since the first version of this contract (names and fields unchanged; additions
 * only): the entry names (CG_PTX_ENTRY_*), the parameter layout (cg_ptx_layout,
 * cg_ptx_params_layout, the launch words CG_PTX_L_*, scratch records), which entries a kernel
 * gets (cg_ptx_is_elementwise, cg_ptx_has_multipass) and the option defaults. A launch whose
 * grid has a zero dimension never happens: an empty domain plans no launch (plan->n == 0).
 * Later: the shared-memory row entry (CG_PTX_ENTRY_ROWS_SMEM, its launches ask for dynamic
 * shared memory) and the element-wise innermost path (CG_PTX_FLAG_INNER); then that entry's
 * 16-byte copies and stores (CG_PTX_FLAG_ROW_VEC, CG_PTX_FLAG_ROW_VEC_OUT), kept stage values
 * written by the whole block over an input's row (cg_ptx_row_alias), which inputs it caches
 * (cg_ptx_row_cached no longer counts phases that read a kept value instead), and the
 * element-wise default of positions per thread (cg_ptx_default_items); then the column entry
 * (CG_PTX_ENTRY_COLS, cg_ptx_has_cols, cg_ptx_cols_threads); then, for sm >= 90, every entry
 * starts with griddepcontrol.wait (cg_ptx_grid_dependency), which the runtime relies on to launch with programmatic stream serialization. */
#ifndef BURNC_PTX_H
#define BURNC_PTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

/* Code parameters autotune may choose; all-zero means the defaults of the generator. */
typedef struct cg_ptx_options {
    int sm;          /* compute capability x 10 + minor: 90 for sm_90 (required) */
    int block;       /* threads per block of the main entry: 64..1024, a multiple of 32; 0: default */
    int items;       /* element-wise: positions per thread (1, 2, 4, 8); 0: default */
    int rows_per_block; /* row kernels with short rows: rows (warps) per block; 0: default */
} cg_ptx_options;

enum { CG_PTX_MAX_LAUNCHES = 16, CG_PTX_MAX_PARAM_WORDS = 512 };

/* The entries a module may hold (cg_ptx_launch.entry names one of them):
 *  element-wise kernels (n_outer == rank): CG_PTX_ENTRY_EW only;
 *  row kernels: CG_PTX_ENTRY_ROWS_WARP (rows of at most KIR_LEAF positions, one warp per row),
 *  CG_PTX_ENTRY_ROWS_BLOCK (longer rows, one block per row), and, for kernels with one stage
 *  and no element stores, the multi-pass trio CG_PTX_ENTRY_LEAVES, CG_PTX_ENTRY_TREE and
 *  CG_PTX_ENTRY_FINISH (few long rows: the whole GPU on each row). */
#define CG_PTX_ENTRY_EW "burnc_ew"
#define CG_PTX_ENTRY_ROWS_WARP "burnc_rows_warp"
#define CG_PTX_ENTRY_ROWS_BLOCK "burnc_rows_block"
#define CG_PTX_ENTRY_LEAVES "burnc_leaves"
#define CG_PTX_ENTRY_TREE "burnc_tree"
#define CG_PTX_ENTRY_FINISH "burnc_finish"
/* Rows longer than a leaf whose cached inputs (cg_ptx_row_cached) and kept stage values
 * (cg_ptx_row_kept) fit CG_PTX_SMEM_ROW_BYTES of dynamic shared memory (cg_ptx_row_smem_bytes):
 * block per row, the cached inputs copied from global memory once into shared memory, every
 * stage and the element stores reading them there. Emitted when the kernel keeps something. */
#define CG_PTX_ENTRY_ROWS_SMEM "burnc_rows_smem"
/* Rows that lie side by side in memory, read along a strided reduced axis (a sum over the
 * batch axis: rows are columns): with C = cg_ptx_cols(options), block c takes rows [c C, c C +
 * C), thread t the row t % C at lane t / C of kernel.h's order, so a warp's load reads C
 * neighbouring rows at 32 / C positions (whole 32-byte sectors of f32 from C = 8) instead of 32
 * positions of one row; the lanes' values meet in shared memory, where warp w does row w's lane
 * tree. Emitted when cg_ptx_has_cols; the planner takes it when the arguments' strides say so.
 * Its block is cg_ptx_cols_threads, whatever options.block says: the threads past the lanes
 * (element stores that wait for the last stage) do element stores only; other element stores
 * go in the last pass (cg_ptx_cols_pass_stores). */
#define CG_PTX_ENTRY_COLS "burnc_cols"

/* The parameter block, in 8-byte words, the same for every entry of a kernel:
 *   in_addr[n_inputs], out_addr[n_outputs]    device addresses
 *   extents[rank]
 *   in_off[n_inputs], in_stride[n_inputs * rank]     elements (every class's stride is there;
 *   out_off[n_outputs], out_stride[n_outputs * rank]  the code reads only the ANY ones)
 *   scalars[n_scalars]                          kir_scalar bits
 *   launch[CG_PTX_LAUNCH_WORDS]                 what this launch does (CG_PTX_L_*)
 * Scratch (multi-pass reductions) holds 16-byte records: the value in the first 8 bytes (as
 * its type, little-endian, at offset 0) and the position (i64) in the last 8. */
typedef struct cg_ptx_layout {
    int in_addr, out_addr, extents, in_off, in_stride, out_off, out_stride, scalars, launch, n_words;
} cg_ptx_layout;

enum {
    CG_PTX_L_COUNT,  /* element-wise: positions of the domain; other entries: rows */
    CG_PTX_L_FLAGS,  /* element-wise: bit 0 every slot is contiguous and aligned (fast path); bit 1
                        a thread's positions stay in one innermost row and its vectors are aligned
                        (innermost path, cg_ptx_has_inner); shared-memory row entry: bit 2 every
                        cached input's row is contiguous, its start and length multiples of 16
                        bytes (copied as 16-byte vectors); bit 3 the same of every element-store
                        output (cg_ptx_row_vec_out: 4 positions a thread, 16-byte stores) */
    CG_PTX_L_LEAVES, /* leaves: leaves per row */
    CG_PTX_L_SRC,    /* tree, finish: scratch address of the records read */
    CG_PTX_L_SRC_N,  /* tree: records per row in SRC */
    CG_PTX_L_DST,    /* leaves, tree: scratch address of the records written */
    CG_PTX_L_DST_N,  /* tree: records per row in DST (ceil(SRC_N / 32)) */
    CG_PTX_LAUNCH_WORDS = 8
};
enum { CG_PTX_FLAG_FAST = 1, CG_PTX_FLAG_INNER = 2, CG_PTX_FLAG_ROW_VEC = 4, CG_PTX_FLAG_ROW_VEC_OUT = 8 };
enum { CG_PTX_RECORD_BYTES = 16 };

static inline cg_ptx_layout cg_ptx_params_layout(const kir_kernel *k)
{
    cg_ptx_layout l;
    l.in_addr = 0;
    l.out_addr = l.in_addr + k->n_inputs;
    l.extents = l.out_addr + k->n_outputs;
    l.in_off = l.extents + k->rank;
    l.in_stride = l.in_off + k->n_inputs;
    l.out_off = l.in_stride + k->n_inputs * k->rank;
    l.out_stride = l.out_off + k->n_outputs;
    l.scalars = l.out_stride + k->n_outputs * k->rank;
    l.launch = l.scalars + k->n_scalars;
    l.n_words = l.launch + CG_PTX_LAUNCH_WORDS;
    return l;
}

/* Whether a slot reads one element for the whole domain (every stride class ZERO): the fast
 * element-wise path loads it once instead of as a vector. */
static inline bool cg_ptx_slot_uniform(const kir_kernel *k, const kir_slot *s)
{
    for (int d = 0; d < k->rank; d++)
        if (s->stride[d] != KIR_STRIDE_ZERO)
            return false;
    return true;
}

/* Whether an element-wise kernel of rank >= 2 has the innermost path: every output has unit
 * stride on the last axis and every input unit or zero (broadcast) stride there, so a thread
 * whose positions lie in one innermost row loads a vector per unit-stride input and one element
 * per broadcast input, from offsets computed once. */
static inline bool cg_ptx_has_inner(const kir_kernel *k)
{
    if (k->rank < 2 || k->n_outer != k->rank || k->n_stages != 0)
        return false;
    for (int s = 0; s < k->n_outputs; s++)
        if (k->outputs[s].stride[k->rank - 1] != KIR_STRIDE_UNIT)
            return false;
    for (int s = 0; s < k->n_inputs; s++)
        if (k->inputs[s].stride[k->rank - 1] == KIR_STRIDE_ANY)
            return false;
    return true;
}

/* Which entries a kernel gets (the generator and the planner decide alike): element-wise
 * kernels have no reduced axes and no stages (stages over an empty set of axes go through the
 * row entries, one position per row); the multi-pass trio needs one stage, and element stores
 * only of values that do not use its result: the leaves entry does them beside the leaf's
 * combine (the loss of a training step: its mean, and the difference kept for backward). */
enum { CG_PTX_MULTIPASS_MAX_INSTS = 2048 }; /* past this, no multi-pass and no column pass with
                                             * stores (a stack mark array) */
static inline bool cg_ptx_is_elementwise(const kir_kernel *k) { return k->n_outer == k->rank && k->n_stages == 0; }

/* Whether the kernel stores at element positions (not only one value a row). */
static inline bool cg_ptx_has_elem_stores(const kir_kernel *k)
{
    for (int i = 0; i < k->n_stores; i++)
        if (!k->stores[i].row)
            return true;
    return false;
}

/* Whether no element store's value uses the result (KIR_REDUCED) of stage `from` or a later
 * one; uses[n_insts] is scratch: instruction i uses one. */
static inline bool cg_ptx_elem_stores_before(const kir_kernel *k, int from, bool *uses)
{
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        int32_t o[3] = {in->a, in->b, in->c};
        uses[i] = in->op == KIR_REDUCED && in->a >= from;
        for (int j = 0; j < kir_n_operands(in->op); j++)
            uses[i] |= o[j] >= 0 && o[j] < i && uses[o[j]];
    }
    for (int i = 0; i < k->n_stores; i++)
        if (!k->stores[i].row && uses[k->stores[i].value])
            return false;
    return true;
}

/* Whether no element store's value uses a stage's result. */
static inline bool cg_ptx_elem_stores_independent(const kir_kernel *k, bool *uses)
{
    return cg_ptx_elem_stores_before(k, 0, uses);
}

static inline bool cg_ptx_has_multipass(const kir_kernel *k)
{
    if (cg_ptx_is_elementwise(k) || k->n_stages != 1)
        return false;
    if (!cg_ptx_has_elem_stores(k))
        return true;
    if (k->n_insts > CG_PTX_MULTIPASS_MAX_INSTS)
        return false;
    bool uses[CG_PTX_MULTIPASS_MAX_INSTS];
    return cg_ptx_elem_stores_independent(k, uses);
}

/* Whether a kernel gets the column entry: an input that moves along the last outer axis and
 * along a reduced axis of runtime stride (not unit), so its rows may be neighbours in memory
 * and its reduced positions apart. */
static inline bool cg_ptx_has_cols(const kir_kernel *k)
{
    if (cg_ptx_is_elementwise(k) || k->n_outer < 1)
        return false;
    for (int s = 0; s < k->n_inputs; s++) {
        if (k->inputs[s].stride[k->n_outer - 1] == KIR_STRIDE_ZERO)
            continue;
        for (int d = k->n_outer; d < k->rank; d++)
            if (k->inputs[s].stride[d] == KIR_STRIDE_ANY)
                return true;
    }
    return false;
}

/* Marks the instructions that phase ph of a row evaluates at reduced positions: stage ph's
 * value (ph < n_stages) or the element stores' values (ph == n_stages), with their operands. */
static inline void cg_ptx_phase_mark(const kir_kernel *k, int ph, bool *mark)
{
    for (int i = 0; i < k->n_insts; i++)
        mark[i] = false;
    if (ph < k->n_stages)
        mark[k->stages[ph].value] = true;
    else
        for (int i = 0; i < k->n_stores; i++)
            if (!k->stores[i].row)
                mark[k->stores[i].value] = true;
    /* operands come before their users: one backward sweep marks everything reached */
    for (int i = k->n_insts - 1; i >= 0; i--) {
        if (!mark[i])
            continue;
        const kir_inst *in = &k->insts[i];
        int ops = kir_n_operands(in->op);
        int32_t o[3] = {in->a, in->b, in->c};
        for (int j = 0; j < ops; j++)
            if (o[j] >= 0 && o[j] < i)
                mark[o[j]] = true;
    }
}

static inline int cg_ptx_dtype_size(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_I64   ? 8
           : dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_I32 ? 4
           : dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16 ? 2
                                                             : 1;
}

/* Bytes per position of a stage value the shared-memory row entry keeps (0: not kept). */
static inline int cg_ptx_kept_size(kir_type t)
{
    return t == KIR_F32 || t == KIR_I32 || t == KIR_U32 ? 4 : t == KIR_F64 || t == KIR_I64 || t == KIR_U64 ? 8 : 0;
}

/* Stages whose per-position value a later phase evaluates again (softmax: exp(x - max) is
 * summed, then divided at every position): the shared-memory row entry evaluates the stage's
 * value once per position with the whole block, keeps it on chip (32- and 64-bit types), and
 * the stage's combine and later phases read it there (the same instructions, so the same
 * bits). Sets kept[st]; returns how many. */
static inline int cg_ptx_row_kept(const kir_kernel *k, bool *kept)
{
    int n = 0;
    for (int st = 0; st < KIR_MAX_STAGES; st++)
        kept[st] = false;
    if (cg_ptx_is_elementwise(k) || k->n_insts <= 0 || k->n_outer == k->rank)
        return 0;
    bool mark[k->n_insts];
    for (int ph = 1; ph <= k->n_stages; ph++) {
        cg_ptx_phase_mark(k, ph, mark);
        for (int st = 0; st < ph; st++)
            if (mark[k->stages[st].value] && k->insts[k->stages[st].value].op != KIR_LOAD &&
                cg_ptx_kept_size(k->insts[k->stages[st].value].type))
                kept[st] = true; /* (a load's value is an input: cached, not kept) */
    }
    for (int st = 0; st < k->n_stages; st++)
        n += kept[st];
    return n;
}

/* What phase ph of the shared-memory row entry evaluates: as cg_ptx_phase_mark, but the values
 * of kept stages before ph are read back, so what they depend on is not evaluated again. */
static inline void cg_ptx_phase_mark_kept(const kir_kernel *k, int ph, const bool *kept, bool *mark)
{
    bool stop[k->n_insts];
    for (int i = 0; i < k->n_insts; i++)
        stop[i] = mark[i] = false;
    for (int st = 0; st < ph && st < k->n_stages; st++)
        if (kept[st])
            stop[k->stages[st].value] = true;
    if (ph < k->n_stages)
        mark[k->stages[ph].value] = true;
    else
        for (int i = 0; i < k->n_stores; i++)
            if (!k->stores[i].row)
                mark[k->stores[i].value] = true;
    for (int i = k->n_insts - 1; i >= 0; i--) {
        if (!mark[i] || stop[i])
            continue;
        const kir_inst *in = &k->insts[i];
        int ops = kir_n_operands(in->op);
        int32_t o[3] = {in->a, in->b, in->c};
        for (int j = 0; j < ops; j++)
            if (o[j] >= 0 && o[j] < i)
                mark[o[j]] = true;
    }
}

/* Whether phase ph of the shared-memory row entry loads input s at reduced positions. */
static inline bool cg_ptx_phase_reads(const kir_kernel *k, int ph, const bool *kept, int s)
{
    bool mark[k->n_insts];
    cg_ptx_phase_mark_kept(k, ph, kept, mark);
    for (int i = 0; i < k->n_insts; i++)
        if (mark[i] && k->insts[i].op == KIR_LOAD && k->insts[i].a == s)
            return true;
    return false;
}

/* Inputs the shared-memory row entry keeps on chip: those moving along a reduced axis that two
 * or more of the row's phases read (each stage is a phase, the element stores one more; a
 * phase reading a kept stage's value does not read what that value was computed from), so
 * that global memory is read once instead of once per phase. Sets cached[s]; returns how many. */
static inline int cg_ptx_row_cached(const kir_kernel *k, bool *cached)
{
    int n = 0;
    bool kept[KIR_MAX_STAGES];
    for (int s = 0; s < KIR_MAX_INPUTS; s++)
        cached[s] = false;
    if (cg_ptx_is_elementwise(k) || k->n_insts <= 0)
        return 0;
    cg_ptx_row_kept(k, kept);
    for (int s = 0; s < k->n_inputs; s++) {
        bool moves = false;
        int phases = 0;
        for (int d = k->n_outer; d < k->rank; d++)
            moves |= k->inputs[s].stride[d] != KIR_STRIDE_ZERO;
        for (int ph = 0; moves && ph <= k->n_stages; ph++)
            phases += cg_ptx_phase_reads(k, ph, kept, s);
        cached[s] = moves && phases >= 2;
        n += cached[s];
    }
    return n;
}

/* Where the shared-memory row entry keeps each kept stage's values: over the row of a cached
 * input of the same size that no later phase reads (softmax: exp(x - max) over x, so a row
 * of 8192 f32 takes 32 KB instead of 64 and twice the blocks fit an SM). Position j's value
 * is computed from position j's elements by the thread that then overwrites them, so no
 * thread reads what another overwrote. alias[st] is the input slot, or -1 for a region of its
 * own (and for stages not kept). */
static inline void cg_ptx_row_alias(const kir_kernel *k, const bool *cached, const bool *kept, int *alias)
{
    bool taken[KIR_MAX_INPUTS] = {false};
    for (int st = 0; st < KIR_MAX_STAGES; st++)
        alias[st] = -1;
    for (int st = 0; st < k->n_stages; st++) {
        if (!kept[st])
            continue;
        int size = cg_ptx_kept_size(k->insts[k->stages[st].value].type);
        for (int s = 0; s < k->n_inputs && alias[st] < 0; s++) {
            bool later = false;
            if (!cached[s] || taken[s] || cg_ptx_dtype_size(k->inputs[s].dtype) != size)
                continue;
            for (int ph = st + 1; ph <= k->n_stages && !later; ph++)
                later = cg_ptx_phase_reads(k, ph, kept, s);
            if (!later) {
                alias[st] = s;
                taken[s] = true;
            }
        }
    }
}

/* Whether the shared-memory row entry has the 4-positions path for its element stores (taken
 * when the planner sets CG_PTX_FLAG_ROW_VEC_OUT): one reduced axis, element stores only of
 * 32-bit dtypes, so 4 positions make one 16-byte store per output. */
static inline bool cg_ptx_row_vec_out(const kir_kernel *k)
{
    bool any = false;
    if (cg_ptx_is_elementwise(k) || k->rank - k->n_outer != 1)
        return false;
    for (int i = 0; i < k->n_stores; i++) {
        if (k->stores[i].row)
            continue;
        if (cg_ptx_dtype_size(k->outputs[k->stores[i].slot].dtype) != 4)
            return false;
        any = true;
    }
    return any;
}

/* The dynamic shared memory of the shared-memory row entry for rows of row_len positions:
 * the cached inputs in slot order, then the kept stage values that alias no input, in stage
 * order, each region rounded up to 16 bytes. 0 when the kernel keeps nothing. */
static inline uint64_t cg_ptx_row_smem_bytes(const kir_kernel *k, uint64_t row_len)
{
    bool cached[KIR_MAX_INPUTS], kept[KIR_MAX_STAGES];
    int alias[KIR_MAX_STAGES];
    uint64_t bytes = 0;
    if (cg_ptx_row_cached(k, cached) + cg_ptx_row_kept(k, kept) == 0)
        return 0;
    cg_ptx_row_alias(k, cached, kept, alias);
    for (int s = 0; s < k->n_inputs; s++)
        if (cached[s])
            bytes += (row_len * (uint64_t)cg_ptx_dtype_size(k->inputs[s].dtype) + 15) & ~(uint64_t)15;
    for (int st = 0; st < k->n_stages; st++)
        if (kept[st] && alias[st] < 0)
            bytes += (row_len * (uint64_t)cg_ptx_kept_size(k->insts[k->stages[st].value].type) + 15) & ~(uint64_t)15;
    return bytes;
}

/* Defaults of cg_ptx_options' zero fields (the planner and the generator agree on them). */
enum { CG_PTX_DEFAULT_BLOCK = 256, CG_PTX_DEFAULT_ITEMS = 4, CG_PTX_DEFAULT_ROWS_PER_BLOCK = 8 };

/* The column entry's rows per block: rows_per_block rounded down to a power of two in [4, 32]
 * (autotune's row candidates choose it). */
static inline int cg_ptx_cols(const cg_ptx_options *o)
{
    int r = o->rows_per_block ? o->rows_per_block : CG_PTX_DEFAULT_ROWS_PER_BLOCK, c = 4;
    while (c < 32 && 2 * c <= r)
        c *= 2;
    return c;
}

/* The stages of the column entry's pass that begins with stage st: st and those after it whose
 * values use no result of a stage from st on, so one evaluation of a position serves them all
 * (a GELU's backward summed for a LayerNorm's weight and for its bias: 66 -> 44 us on the H200
 * over 4096 x 1024, burnc-bench's deep MLP). At most 2: their leaf stacks share the block's
 * static shared memory, 2 x C x 832 bytes, within 48 KB for C <= 16; 1 for C = 32. `uses` has
 * room for CG_PTX_MULTIPASS_MAX_INSTS. */
static inline int cg_ptx_cols_pass_max(int C) { return C > 16 ? 1 : 2; }

static inline int cg_ptx_cols_pass(const kir_kernel *k, int st, int C, bool *uses)
{
    int n = 1;
    if (k->n_insts > CG_PTX_MULTIPASS_MAX_INSTS)
        return n;
    cg_ptx_elem_stores_before(k, st, uses);
    while (n < cg_ptx_cols_pass_max(C) && st + n < k->n_stages && !uses[k->stages[st + n].value])
        n++;
    return n;
}

/* Whether the column entry does the element stores in its last pass (cg_ptx_cols_pass), each
 * where the lane that combines the position has just evaluated it: none uses the result of a
 * stage of that pass. */
static inline bool cg_ptx_cols_pass_stores(const kir_kernel *k, int C)
{
    if (!cg_ptx_has_elem_stores(k) || k->n_stages == 0 || k->n_insts > CG_PTX_MULTIPASS_MAX_INSTS)
        return false;
    bool uses[CG_PTX_MULTIPASS_MAX_INSTS];
    int st = 0, n;
    while (st + (n = cg_ptx_cols_pass(k, st, C, uses)) < k->n_stages)
        st += n;
    return cg_ptx_elem_stores_before(k, st, uses);
}

/* The column entry's threads a block: a lane of each of its rows, times up to 4 (at most 1024)
 * when the kernel has element stores that must wait for every stage, which any thread may do
 * then: a row of one leaf has only 32 lanes. */
static inline int cg_ptx_cols_threads(const kir_kernel *k, const cg_ptx_options *o)
{
    int lanes = cg_ptx_cols(o) * KIR_LANES;
    bool after = cg_ptx_has_elem_stores(k) && !cg_ptx_cols_pass_stores(k, cg_ptx_cols(o));
    return after ? (lanes * 4 > 1024 ? 1024 : lanes * 4) : lanes;
}

/* Positions per thread of an element-wise kernel when the options leave it 0. A thread keeps
 * one 16-byte vector per input in flight at 4 positions of f32; a kernel reading at most one
 * input that moves along every axis (the others broadcast, so served by the caches) then has
 * 16 bytes of DRAM reads per thread in flight, about what an H200 SM needs at full occupancy
 * to cover the memory latency, and no more: such kernels (32-bit slots only) take 8 positions,
 * two vectors. */
static inline int cg_ptx_default_items(const kir_kernel *k)
{
    int full = 0;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        const kir_slot *sl = s < k->n_inputs ? &k->inputs[s] : &k->outputs[s - k->n_inputs];
        if (cg_ptx_dtype_size(sl->dtype) != 4)
            return CG_PTX_DEFAULT_ITEMS;
        bool moves = true;
        for (int d = 0; d < k->rank; d++)
            moves &= sl->stride[d] != KIR_STRIDE_ZERO;
        full += s < k->n_inputs && moves;
    }
    return full <= 1 ? 8 : CG_PTX_DEFAULT_ITEMS;
}
/* Multi-pass reductions pay when rows are fewer than this and have at least
 * CG_PTX_MULTIPASS_LEAVES leaves (2 x the H200's 132 SMs: fewer rows leave SMs idle). */
enum { CG_PTX_MULTIPASS_ROWS = 264, CG_PTX_MULTIPASS_LEAVES = 8 };
/* The shared-memory row entry's limit: 64 KB keeps 3 blocks of 256 threads per H200 SM (228 KB);
 * each region is rounded up to 16 bytes. Launches asking for more than CG_PTX_SMEM_DEFAULT (the
 * 48 KB every function may use without raising its limit, less room for the entry's 1.7 KB of
 * static shared memory: leaf records, the chunk stack, the stage result, the warps' partial
 * maxima) ask for CG_PTX_SMEM_ROW_BYTES. */
enum { CG_PTX_SMEM_ROW_BYTES = 64 * 1024, CG_PTX_SMEM_DEFAULT = 46 * 1024 };

typedef struct cg_ptx_launch {
    char entry[32];          /* the .entry name in the PTX */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes;   /* dynamic shared memory */
    uint32_t n_words;        /* parameter block: words[0..n_words) */
    uint64_t words[CG_PTX_MAX_PARAM_WORDS];
} cg_ptx_launch;

typedef struct cg_ptx_plan {
    int n;                               /* launches, run in order on one stream */
    cg_ptx_launch launch[CG_PTX_MAX_LAUNCHES];
    size_t scratch_bytes;                /* device scratch the launches need (multi-pass reductions) */
} cg_ptx_plan;

/* 16-bit functions by table (codegen/ptx_lut.c). An element store of an element-wise kernel
 * into an f16 or bf16 output whose value is a function of one f16 or bf16 number alone (`src`:
 * a load of such an input or a KIR_ROUND to such a type; everything else between them
 * constants), through at least CG_PTX_LUT_MIN instructions, stores table[src's 16 bits]
 * instead. The 65536 stored patterns come from kir_eval running those same instructions (the
 * devices' results are bitwise equal, DESIGN.md), the generator puts the table in the module's
 * constant data and the instructions in between are never emitted: a bf16 GELU is a load and
 * a gather instead of about 100 instructions an element. The runtime makes the tables before
 * compiling and hands them to compile_ptx; the same kernel always gets the same tables, so
 * the PTX stays a function of the kernel and the options. */
enum { CG_PTX_LUT_MIN = 24, CG_PTX_LUT_SIZE = 65536 };
typedef struct cg_ptx_lut {
    int store;            /* index into k->stores */
    int32_t src;          /* the instruction whose 16 bits index the table */
    burnc_dtype_t src_dt; /* its 16-bit type: BURNC_DTYPE_F16 or BURNC_DTYPE_BF16 */
    uint16_t *table;      /* CG_PTX_LUT_SIZE patterns of the output's dtype */
} cg_ptx_lut;
typedef struct cg_ptx_luts {
    int n;
    cg_ptx_lut lut[KIR_MAX_OUTPUTS];
} cg_ptx_luts;

/* The source of store st's table, or -1 when that store does not take one. */
int32_t cg_ptx_lut_source(const kir_kernel *k, int st);
/* Finds k's tabulated stores and computes their tables into *out (cg_ptx_luts_free releases
 * them). False when memory runs out (then out->n is 0 and nothing is held). */
bool cg_ptx_luts_make(const kir_kernel *k, cg_ptx_luts *out);
void cg_ptx_luts_free(cg_ptx_luts *l);

/* Plans the launches of kernel k for the values of args, whose inputs/outputs hold device
 * addresses (CUdeviceptr cast to void *). Call once with scratch == 0 to learn
 * plan->scratch_bytes; when it is nonzero, that call plans no launch (plan->n == 0): call again
 * with the address of that much device memory (256-byte aligned) to get the final plan. False
 * with a reason (in why) when the launch cannot be planned (a size past the device's grid
 * limits, a negative extent, too many parameter words). args->stream is ignored. */
bool cg_ptx_plan_launches(const kir_kernel *k, const cg_ptx_options *opt, const kir_args *args, uint64_t scratch,
                          cg_ptx_plan *plan, char *why, size_t why_cap);

#endif
