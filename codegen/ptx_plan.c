/* The launches of a PTX kernel (codegen/ptx.h): which entries of codegen/llvm_ptx.c's module run,
 * in which order, with which grid, block and parameter words. Part of libburnc (no LLVM): a
 * process that loads cached cubins still plans its launches.
 *
 * Every choice here mirrors one in the generator: the element-wise thread owns `items`
 * consecutive positions (fast path when the flag says every slot is contiguous and aligned for
 * the vector), row kernels take a warp per row up to one leaf and a block per row beyond, and
 * few long rows of a single-stage kernel without element stores go through the multi-pass
 * entries (leaves, tree passes over chunks of 32 records, finish). Rows longer than a leaf
 * whose re-read inputs fit in shared memory go through the shared-memory row entry. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/ptx.h"

enum { GRID_X_MAX = 0x7fffffff };

__attribute__((format(printf, 3, 4))) static bool failf(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return false;
}

static int dtype_size(burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F64:
    case BURNC_DTYPE_I64: return 8;
    case BURNC_DTYPE_F32:
    case BURNC_DTYPE_I32: return 4;
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return 2;
    default: return 1;
    }
}

/* A slot's stride along axis d in elements (its class, or the argument). */
static int64_t stride_of(const kir_slot *sl, const int64_t *strides, int d)
{
    return sl->stride[d] == KIR_STRIDE_ZERO ? 0 : sl->stride[d] == KIR_STRIDE_UNIT ? 1 : strides[d];
}

/* Whether the slot's element at flat position p of the domain is offset + p: every axis longer
 * than 1 has the stride of a row-major layout of the domain. */
static bool slot_contiguous(const kir_kernel *k, const kir_slot *s, const int64_t *extents, const int64_t *strides)
{
    int64_t want = 1;
    for (int d = k->rank - 1; d >= 0; d--) {
        if (extents[d] == 1)
            continue;
        int64_t have = stride_of(s, strides, d);
        if (have != want)
            return false;
        want *= extents[d];
    }
    return true;
}

/* Fast element-wise path: every non-uniform input and every output contiguous, its first element
 * aligned for a vector of `items` elements (16 bytes at most). */
static bool ew_fast(const kir_kernel *k, const kir_args *a, int items)
{
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool out = s >= k->n_inputs;
        int i = out ? s - k->n_inputs : s;
        const kir_slot *sl = out ? &k->outputs[i] : &k->inputs[i];
        if (!out && cg_ptx_slot_uniform(k, sl))
            continue;
        const int64_t *strides = (out ? a->out_strides : a->in_strides) + (size_t)i * (size_t)k->rank;
        if (!slot_contiguous(k, sl, a->extents, strides))
            return false;
        uint64_t size = (uint64_t)dtype_size(sl->dtype),
                 vec = size * (uint64_t)items > 16 ? 16 : size * (uint64_t)items;
        uint64_t addr = (uint64_t)(uintptr_t)(out ? a->outputs[i] : a->inputs[i]) +
                        (uint64_t)(out ? a->out_offsets[i] : a->in_offsets[i]) * size;
        if (addr % vec)
            return false;
    }
    return true;
}

/* Innermost path (cg_ptx_has_inner): items divide the last extent, so a thread's positions
 * stay in one innermost row; every vector slot (the outputs, the inputs of unit stride on the
 * last axis) has its first element and its steps along the other axes aligned for the vector. */
static bool ew_inner(const kir_kernel *k, const kir_args *a, int items)
{
    int last = k->rank - 1;
    if (!cg_ptx_has_inner(k) || a->extents[last] % items)
        return false;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool out = s >= k->n_inputs;
        int i = out ? s - k->n_inputs : s;
        const kir_slot *sl = out ? &k->outputs[i] : &k->inputs[i];
        if (sl->stride[last] != KIR_STRIDE_UNIT)
            continue;
        const int64_t *strides = (out ? a->out_strides : a->in_strides) + (size_t)i * (size_t)k->rank;
        uint64_t size = (uint64_t)dtype_size(sl->dtype),
                 vec = size * (uint64_t)items > 16 ? 16 : size * (uint64_t)items;
        uint64_t addr = (uint64_t)(uintptr_t)(out ? a->outputs[i] : a->inputs[i]) +
                        (uint64_t)(out ? a->out_offsets[i] : a->in_offsets[i]) * size;
        if (addr % vec)
            return false;
        for (int d = 0; d < last; d++) {
            int64_t st = stride_of(sl, strides, d);
            if (a->extents[d] > 1 && ((uint64_t)st * size) % vec)
                return false;
        }
    }
    return true;
}

/* Shared-memory row entry: every cached input's row is one contiguous range whose start (for
 * every row) and length are multiples of 16 bytes, so it is copied on chip as 16-byte vectors. */
static bool row_vec(const kir_kernel *k, const kir_args *a, uint64_t row_len)
{
    bool cached[KIR_MAX_INPUTS];
    cg_ptx_row_cached(k, cached);
    for (int s = 0; s < k->n_inputs; s++) {
        if (!cached[s])
            continue;
        const int64_t *strides = a->in_strides + (size_t)s * (size_t)k->rank;
        uint64_t size = (uint64_t)dtype_size(k->inputs[s].dtype), want = 1;
        if ((row_len * size) % 16 || ((uint64_t)(uintptr_t)a->inputs[s] + (uint64_t)a->in_offsets[s] * size) % 16)
            return false;
        for (int d = k->rank - 1; d >= 0; d--) {
            if (a->extents[d] == 1)
                continue;
            int64_t st = stride_of(&k->inputs[s], strides, d);
            if (d >= k->n_outer ? (uint64_t)st != want : ((uint64_t)st * size) % 16)
                return false;
            if (d >= k->n_outer)
                want *= (uint64_t)a->extents[d];
        }
    }
    return true;
}

/* ... and the 4-positions store path: every element-store output's row contiguous, its start
 * (for every row) and length multiples of 16 bytes. */
static bool row_vec_out(const kir_kernel *k, const kir_args *a, uint64_t row_len)
{
    if (!cg_ptx_row_vec_out(k) || (row_len * 4) % 16)
        return false;
    for (int i = 0; i < k->n_stores; i++) {
        int o = k->stores[i].slot;
        if (k->stores[i].row)
            continue;
        const int64_t *strides = a->out_strides + (size_t)o * (size_t)k->rank;
        int last = k->rank - 1;
        int64_t st = stride_of(&k->outputs[o], strides, last);
        if ((a->extents[last] > 1 && st != 1) || ((uint64_t)(uintptr_t)a->outputs[o] + (uint64_t)a->out_offsets[o] * 4) % 16)
            return false;
        for (int d = 0; d < last; d++) {
            int64_t sd = stride_of(&k->outputs[o], strides, d);
            if (a->extents[d] > 1 && ((uint64_t)sd * 4) % 16)
                return false;
        }
    }
    return true;
}

/* Column entry (cg_ptx_has_cols): every input that moves along the reduced axes either stays
 * from row to row (the last outer axis: a broadcast along it), or steps by one element there
 * and not by one along its innermost moving reduced axis; at least one steps. Such rows are
 * neighbours in memory, and a warp of the row entries would read 32 positions far apart. */
static bool cols_layout(const kir_kernel *k, const kir_args *a)
{
    int o = k->n_outer - 1;
    bool any = false;
    if (!cg_ptx_has_cols(k) || a->extents[o] < 2)
        return false;
    for (int s = 0; s < k->n_inputs; s++) {
        const kir_slot *sl = &k->inputs[s];
        const int64_t *strides = a->in_strides + (size_t)s * (size_t)k->rank;
        int64_t inner = 0;
        for (int d = k->rank - 1; d >= k->n_outer && !inner; d--)
            if (a->extents[d] > 1)
                inner = stride_of(sl, strides, d);
        if (!inner)
            continue; /* the same elements for every reduced position */
        int64_t across = stride_of(sl, strides, o);
        if (across == 0)
            continue; /* one element for all of a block's rows */
        if (across != 1 || inner == 1 || inner == -1)
            return false;
        any = true;
    }
    return any;
}

/* The words every launch of the kernel shares. */
static void fill_words(const kir_kernel *k, const kir_args *a, const cg_ptx_layout *l, uint64_t *w)
{
    memset(w + l->launch, 0, sizeof(uint64_t) * CG_PTX_LAUNCH_WORDS); /* the rest is written below */
    for (int s = 0; s < k->n_inputs; s++) {
        w[l->in_addr + s] = (uint64_t)(uintptr_t)a->inputs[s];
        w[l->in_off + s] = (uint64_t)a->in_offsets[s];
        for (int d = 0; d < k->rank; d++)
            w[l->in_stride + s * k->rank + d] = (uint64_t)a->in_strides[s * k->rank + d];
    }
    for (int s = 0; s < k->n_outputs; s++) {
        w[l->out_addr + s] = (uint64_t)(uintptr_t)a->outputs[s];
        w[l->out_off + s] = (uint64_t)a->out_offsets[s];
        for (int d = 0; d < k->rank; d++)
            w[l->out_stride + s * k->rank + d] = (uint64_t)a->out_strides[s * k->rank + d];
    }
    for (int d = 0; d < k->rank; d++)
        w[l->extents + d] = (uint64_t)a->extents[d];
    for (int s = 0; s < k->n_scalars; s++)
        w[l->scalars + s] = a->scalars[s].u;
}

/* Appends a launch of `threads` threads in blocks of `block` (grid.x = the blocks needed). */
static cg_ptx_launch *add(cg_ptx_plan *p, const char *entry, uint64_t threads, uint32_t block, const uint64_t *words,
                          const cg_ptx_layout *l)
{
    cg_ptx_launch *x = &p->launch[p->n++];
    /* the header only: words past n_words are never read, and a plan is 64 KB (per launch,
     * small kernels would pay for clearing it) */
    memset(x, 0, offsetof(cg_ptx_launch, words));
    snprintf(x->entry, sizeof x->entry, "%s", entry);
    uint64_t grid = (threads + block - 1) / block;
    x->grid[0] = grid > GRID_X_MAX ? 0 : (uint32_t)grid; /* checked by the caller */
    x->grid[1] = x->grid[2] = 1;
    x->block[0] = block;
    x->block[1] = x->block[2] = 1;
    x->n_words = (uint32_t)l->n_words;
    memcpy(x->words, words, sizeof(uint64_t) * (size_t)l->n_words);
    return x;
}

/* ceil(a / b) for b > 0 */
static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

bool cg_ptx_plan_launches(const kir_kernel *k, const cg_ptx_options *opt, const kir_args *args, uint64_t scratch,
                          cg_ptx_plan *plan, char *why, size_t why_cap)
{
    if (plan) {
        plan->n = 0;
        plan->scratch_bytes = 0;
    }
    if (!k || !opt || !args || !plan)
        return failf(why, why_cap, "ptx plan: missing kernel, options, arguments or plan");
    const char *name = k->name[0] ? k->name : "kernel";
    cg_ptx_layout l = cg_ptx_params_layout(k);
    if (l.n_words > CG_PTX_MAX_PARAM_WORDS)
        return failf(why, why_cap, "%s: %d parameter words, more than %d", name, l.n_words, CG_PTX_MAX_PARAM_WORDS);
    uint64_t rows = 1, row_len = 1;
    for (int d = 0; d < k->rank; d++) {
        if (args->extents[d] < 0)
            return failf(why, why_cap, "%s: axis %d has a negative extent %lld", name, d, (long long)args->extents[d]);
        if (d < k->n_outer)
            rows *= (uint64_t)args->extents[d];
        else
            row_len *= (uint64_t)args->extents[d];
    }
    uint64_t w[CG_PTX_MAX_PARAM_WORDS];
    fill_words(k, args, &l, w);
    uint64_t *lw = w + l.launch;
    uint32_t block = opt->block ? (uint32_t)opt->block : CG_PTX_DEFAULT_BLOCK;
    if (rows == 0)
        return true; /* nothing to run */

    if (cg_ptx_is_elementwise(k)) {
        int items = opt->items ? opt->items : cg_ptx_default_items(k);
        lw[CG_PTX_L_COUNT] = rows;
        lw[CG_PTX_L_FLAGS] = ew_fast(k, args, items) ? CG_PTX_FLAG_FAST : ew_inner(k, args, items) ? CG_PTX_FLAG_INNER : 0;
        uint64_t threads = cdiv(rows, (uint64_t)items);
        if (cdiv(threads, block) > GRID_X_MAX)
            return failf(why, why_cap, "%s: %llu positions need %llu blocks, past the grid limit of 2^31 - 1", name,
                         (unsigned long long)rows, (unsigned long long)cdiv(threads, block));
        add(plan, CG_PTX_ENTRY_EW, threads, block, w, &l);
        return true;
    }

    uint64_t leaves = cdiv(row_len, KIR_LEAF);
    lw[CG_PTX_L_COUNT] = rows;
    /* rows side by side: the column entry, unless they are too few to fill more than one block
     * and long enough for the multi-pass entries (not measured: a guess) */
    bool cols = cols_layout(k, args);
    uint32_t per = (uint32_t)cg_ptx_cols(opt), threads = (uint32_t)cg_ptx_cols_threads(k, opt);
    if (cols && (rows >= 2 * per || !cg_ptx_has_multipass(k) || rows >= CG_PTX_MULTIPASS_ROWS ||
                 leaves < CG_PTX_MULTIPASS_LEAVES)) {
        uint64_t blocks = cdiv(rows, per);
        if (blocks > GRID_X_MAX)
            return failf(why, why_cap, "%s: %llu rows need %llu blocks, past the grid limit of 2^31 - 1", name,
                         (unsigned long long)rows, (unsigned long long)blocks);
        add(plan, CG_PTX_ENTRY_COLS, blocks * threads, threads, w, &l);
        return true;
    }
    if (cg_ptx_has_multipass(k) && rows < CG_PTX_MULTIPASS_ROWS && leaves >= CG_PTX_MULTIPASS_LEAVES) {
        /* records: leaves, then ceil(leaves / 32), ... per row; two buffers used in turn */
        uint64_t a_bytes = rows * leaves * CG_PTX_RECORD_BYTES,
                 b_bytes = rows * cdiv(leaves, KIR_LANES) * CG_PTX_RECORD_BYTES;
        a_bytes = (a_bytes + 255) & ~(uint64_t)255;
        plan->scratch_bytes = (size_t)(a_bytes + b_bytes);
        if (!scratch)
            return true; /* the caller asks again with the scratch */
        if (cdiv(rows * leaves * KIR_LANES, block) > GRID_X_MAX)
            return failf(why, why_cap, "%s: %llu leaves need %llu blocks, past the grid limit of 2^31 - 1", name,
                         (unsigned long long)(rows * leaves),
                         (unsigned long long)cdiv(rows * leaves * KIR_LANES, block));
        uint64_t buf[2] = {scratch, scratch + a_bytes};
        lw[CG_PTX_L_LEAVES] = leaves;
        lw[CG_PTX_L_DST] = buf[0];
        add(plan, CG_PTX_ENTRY_LEAVES, rows * leaves * KIR_LANES, block, w, &l);
        uint64_t m = leaves;
        int at = 0;
        while (m > 1) {
            if (plan->n + 2 > CG_PTX_MAX_LAUNCHES)
                return failf(why, why_cap, "%s: %llu leaves per row need more than %d launches", name,
                             (unsigned long long)leaves, CG_PTX_MAX_LAUNCHES);
            uint64_t m2 = cdiv(m, KIR_LANES);
            memset(lw, 0, sizeof(uint64_t) * CG_PTX_LAUNCH_WORDS);
            lw[CG_PTX_L_COUNT] = rows;
            lw[CG_PTX_L_SRC] = buf[at];
            lw[CG_PTX_L_SRC_N] = m;
            lw[CG_PTX_L_DST] = buf[at ^ 1];
            lw[CG_PTX_L_DST_N] = m2;
            add(plan, CG_PTX_ENTRY_TREE, rows * m2 * KIR_LANES, block, w, &l);
            m = m2;
            at ^= 1;
        }
        memset(lw, 0, sizeof(uint64_t) * CG_PTX_LAUNCH_WORDS);
        lw[CG_PTX_L_COUNT] = rows;
        lw[CG_PTX_L_SRC] = buf[at];
        add(plan, CG_PTX_ENTRY_FINISH, rows, block, w, &l);
        return true;
    }
    if (row_len <= KIR_LEAF) {
        uint32_t rpb = opt->rows_per_block ? (uint32_t)opt->rows_per_block : CG_PTX_DEFAULT_ROWS_PER_BLOCK;
        if (cdiv(rows, rpb) > GRID_X_MAX)
            return failf(why, why_cap, "%s: %llu rows need %llu blocks, past the grid limit of 2^31 - 1", name,
                         (unsigned long long)rows, (unsigned long long)cdiv(rows, rpb));
        add(plan, CG_PTX_ENTRY_ROWS_WARP, rows * KIR_LANES, rpb * KIR_LANES, w, &l);
        return true;
    }
    if (rows > GRID_X_MAX)
        return failf(why, why_cap, "%s: %llu rows of %llu positions need a block each, past the grid limit of 2^31 - 1",
                     name, (unsigned long long)rows, (unsigned long long)row_len);
    uint64_t smem = cg_ptx_row_smem_bytes(k, row_len);
    if (smem && smem <= CG_PTX_SMEM_ROW_BYTES) {
        /* the whole block copies the row and does the element stores: keep it full */
        lw[CG_PTX_L_FLAGS] = (row_vec(k, args, row_len) ? CG_PTX_FLAG_ROW_VEC : 0) |
                             (row_vec_out(k, args, row_len) ? CG_PTX_FLAG_ROW_VEC_OUT : 0);
        cg_ptx_launch *x = add(plan, CG_PTX_ENTRY_ROWS_SMEM, rows * block, block, w, &l);
        x->grid[0] = (uint32_t)rows;
        /* past the 48 KB any launch may have, a function's limit is raised once (the CUDA
         * runtime does it at the first such launch): ask for the entry's most every time, so a
         * later, longer row still fits under that limit (ptx.h, CG_PTX_SMEM_DEFAULT) */
        x->shared_bytes = (uint32_t)(smem > CG_PTX_SMEM_DEFAULT ? CG_PTX_SMEM_ROW_BYTES : smem);
        return true;
    }
    /* only warps with a leaf work in a stage: a block of more warps than leaves idles them */
    if (block > KIR_LANES * leaves)
        block = (uint32_t)(KIR_LANES * leaves);
    cg_ptx_launch *x = add(plan, CG_PTX_ENTRY_ROWS_BLOCK, rows * block, block, w, &l);
    x->grid[0] = (uint32_t)rows;
    return true;
}
