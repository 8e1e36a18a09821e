/* Autotune for Vulkan kernels (autotune/autotune.h): the workgroup size and, for element-wise
 * kernels, the positions per invocation. Each candidate is its own pipeline (the sizes are
 * compiled into the shader). None changes a result: element-wise positions are independent,
 * and reductions keep kernel.h's order (warps of 32 lanes take aligned blocks of leaves).
 *
 * Families: "vulkan.elementwise" (wg 64..1024 x items 1..8) and "vulkan.rows" (wg 32..1024; sizes
 * past a warp per leaf are not candidates, the launch cuts them). Launches are recorded for
 * burnc-tune --file (BURNC_AUTOTUNE_RECORD) and vk_tune_kernel tunes such a line.
 * Keys: the kernel's structure hash with the positions (element-wise) or the rows and row
 * length rounded into buckets. Fingerprint: the device's (name, ids, driver, pipeline cache
 * UUID, burnc version). Tuning (BURNC_AUTOTUNE=on, a miss) times each candidate on private
 * buffers as large as the launch's, never on the user's data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "launch.h"
#include "vk.h"

enum { N_WG = 5, N_ITEMS = 4, N_ELEM = N_WG * N_ITEMS, N_ROWS = 6, ROW_HEURISTIC = 3 /* wg 256 */ };
static const int WG[N_WG] = {64, 128, 256, 512, 1024};
static const int ITEMS[N_ITEMS] = {1, 2, 4, 8};
static const int ROW_WG[N_ROWS] = {32, 64, 128, 256, 512, 1024};

static char elem_names[N_ELEM][24], row_names[N_ROWS][24];
static const char *elem_ptrs[N_ELEM], *row_ptrs[N_ROWS];
static at_family fam_elem = {"vulkan.elementwise", N_ELEM, elem_ptrs};
static at_family fam_rows = {"vulkan.rows", N_ROWS, row_ptrs};
static once_flag init_once = ONCE_FLAG_INIT;

static void init(void)
{
    for (int c = 0; c < N_ELEM; c++) {
        snprintf(elem_names[c], sizeof elem_names[c], "wg%d i%d", WG[c / N_ITEMS], ITEMS[c % N_ITEMS]);
        elem_ptrs[c] = elem_names[c];
    }
    for (int c = 0; c < N_ROWS; c++) {
        snprintf(row_names[c], sizeof row_names[c], "wg%d", ROW_WG[c]);
        row_ptrs[c] = row_names[c];
    }
}

static bool is_elementwise(const kir_kernel *k)
{
    if (k->n_stages > 0 || k->n_outer != k->rank)
        return false;
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row)
            return false;
    return true;
}

static cg_glsl_options options_of(const kir_kernel *k, int c, cg_glsl_options base)
{
    if (is_elementwise(k)) {
        base.wg_size = WG[c / N_ITEMS];
        base.items = ITEMS[c % N_ITEMS];
    } else {
        base.wg_size = ROW_WG[c];
    }
    return base;
}

/* ---- Timing a candidate on private buffers ---- */

typedef struct tune_ctx {
    rt_device *dev;
    rt_kernel *k;
    const kir_args *args;
    rt_buffer *const *user_ins, *const *user_outs; /* the launch's, for their sizes */
    rt_buffer *ins[KIR_MAX_INPUTS], *outs[KIR_MAX_OUTPUTS];
} tune_ctx;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static double time_candidate(void *user, int c)
{
    tune_ctx *t = user;
    vk_device *vd = vk_dev(t->dev);
    rt_kernel *v;
    if (vk_kernel_variant(t->dev, t->k, options_of(&t->k->ir, c, t->k->opt), &v) != BURNC_OK ||
        vk_fit_rows(t->dev, v, t->args, &v) != BURNC_OK)
        return -1;
    mtx_lock(&vd->qlock);
    double t0 = 0, ms = -1;
    if (vk_drain(vd) == BURNC_OK) {
        t0 = now_ms();
        if (vk_launch_with(t->dev, v, t->args, t->ins, t->outs) == BURNC_OK && vk_drain(vd) == BURNC_OK)
            ms = now_ms() - t0;
    }
    mtx_unlock(&vd->qlock);
    return ms;
}

/* Private buffers as large as the launch's (the slot sizes follow from the arguments). */
static bool tune_alloc(void *user)
{
    tune_ctx *t = user;
    const kir_kernel *k = &t->k->ir;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool in = s < k->n_inputs;
        rt_buffer *like = in ? t->user_ins[s] : t->user_outs[s - k->n_inputs];
        if (t->dev->be->alloc(t->dev, like->size, in ? &t->ins[s] : &t->outs[s - k->n_inputs]) != BURNC_OK)
            return false;
    }
    return true;
}

static void tune_free(void *user)
{
    tune_ctx *t = user;
    const kir_kernel *k = &t->k->ir;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        rt_buffer *b = s < k->n_inputs ? t->ins[s] : t->outs[s - k->n_inputs];
        if (b)
            t->dev->be->free(t->dev, b);
    }
}

static const at_bench vk_bench = {tune_alloc, time_candidate, tune_free};

static burnc_status_t choose(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                             rt_buffer *const *outs, rt_kernel **out, at_outcome *how)
{
    call_once(&init_once, init);
    const kir_kernel *ir = &k->ir;
    bool elem = is_elementwise(ir);
    int64_t rows, row_len;
    at_launch_rows(ir, args->extents, &rows, &row_len);
    if (ir->n_scalars <= 64) /* a line holds 64 scalars at most */
        at_launch_record("vulkan", ir, args);
    /* row kernels: workgroups wider than a warp per leaf are cut to that at launch (kernels.c),
     * so only the sizes up to it differ (multi-pass launches use any) */
    bool valid[N_ELEM];
    int64_t leaves = (row_len + KIR_LEAF - 1) / KIR_LEAF;
    bool passes = cg_glsl_multipass(ir) && rows < VK_PASSES_ROWS && leaves >= VK_PASSES_LEAVES;
    int64_t cap = 32;
    while (cap < 32 * leaves && cap < 1024)
        cap *= 2;
    for (int c = 0; c < N_ELEM; c++)
        valid[c] = elem || passes || c == ROW_HEURISTIC || (c < N_ROWS && ROW_WG[c] <= cap);
    at_buckets bk = at_get_buckets();
    char key[96];
    if (elem)
        snprintf(key, sizeof key, "%016llx n%lld", (unsigned long long)k->key, (long long)at_bucket(rows, bk));
    else
        snprintf(key, sizeof key, "%016llx r%lld x%lld", (unsigned long long)k->key, (long long)at_bucket(rows, bk),
                 (long long)at_bucket(row_len, bk));
    /* heuristic: 256 invocations of 4 positions; rows: 8 warps (cg_glsl_resolve's defaults) */
    int heuristic = elem ? 2 * N_ITEMS + 2 : ROW_HEURISTIC;
    at_query q = {.fingerprint = vk_dev(dev)->fingerprint, .family = elem ? &fam_elem : &fam_rows, .key = key,
                  .heuristic = heuristic, .valid = valid};
    tune_ctx t = {.dev = dev, .k = k, .args = args, .user_ins = ins, .user_outs = outs};
    int c = at_launch_decide(&q, true, &vk_bench, &t, how);
    return vk_kernel_variant(dev, k, options_of(ir, c, k->opt), out);
}

burnc_status_t vk_tune_choose(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                              rt_buffer *const *outs, rt_kernel **out)
{
    return choose(dev, k, args, ins, outs, out, NULL);
}

/* Bytes a slot's elements reach under the layout (its dtype's size times the highest element
 * index plus one; strides are non-negative in recorded layouts). */
static size_t slot_bytes(const kir_kernel *k, const kir_slot *sl, int64_t off, const int64_t *strides,
                         const int64_t *ext, bool row_store)
{
    int64_t last = off;
    for (int d = 0; d < k->rank; d++) {
        int64_t st = sl->stride[d] == KIR_STRIDE_ZERO ? 0 : sl->stride[d] == KIR_STRIDE_UNIT ? 1 : strides[d];
        if (row_store && d >= k->n_outer)
            st = 0;
        if (ext[d] == 0)
            return ir_dtype_size(sl->dtype);
        last += (ext[d] - 1) * (st < 0 ? -st : st);
    }
    return (size_t)(last + 1) * ir_dtype_size(sl->dtype);
}

burnc_status_t vk_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, at_outcome *out)
{
    rt_kernel *rk, *v;
    RT_TRY(vk_compile_kernel(dev, k, kir_hash(k), &rk));
    rt_buffer *ins[KIR_MAX_INPUTS] = {0}, *outs[KIR_MAX_OUTPUTS] = {0};
    burnc_status_t s = BURNC_OK;
    for (int i = 0; i < k->n_inputs && s == BURNC_OK; i++)
        s = dev->be->alloc(dev, slot_bytes(k, &k->inputs[i], args->in_offsets[i], args->in_strides + i * k->rank,
                                           args->extents, false), &ins[i]);
    for (int o = 0; o < k->n_outputs && s == BURNC_OK; o++) {
        bool row = false;
        for (int st = 0; st < k->n_stores; st++)
            row |= k->stores[st].slot == o && k->stores[st].row;
        s = dev->be->alloc(dev, slot_bytes(k, &k->outputs[o], args->out_offsets[o], args->out_strides + o * k->rank,
                                           args->extents, row), &outs[o]);
    }
    at_outcome how = {0};
    if (s == BURNC_OK)
        s = choose(dev, rk, args, ins, outs, &v, &how);
    for (int i = 0; i < k->n_inputs; i++)
        dev->be->free(dev, ins[i]);
    for (int o = 0; o < k->n_outputs; o++)
        dev->be->free(dev, outs[o]);
    if (out)
        *out = how;
    return s;
}
