/* Autotune for Vulkan kernels (autotune/autotune.h): the workgroup size and, for element-wise
 * kernels, the positions per invocation. Each candidate is its own pipeline (the sizes are
 * compiled into the shader). None changes a result: element-wise positions are independent,
 * and reductions keep kernel.h's order (warps of 32 lanes take aligned blocks of leaves).
 *
 * Families: "vulkan.elementwise" (wg 64..1024 x items 1..8) and "vulkan.rows" (wg 32..1024).
 * Keys: the kernel's structure hash with the positions (element-wise) or the rows and row
 * length rounded into buckets. Fingerprint: the device's (name, ids, driver, pipeline cache
 * UUID, burnc version). Tuning (BURNC_AUTOTUNE=on, a miss) times each candidate on private
 * buffers as large as the launch's, never on the user's data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune.h"
#include "vk.h"

enum { N_WG = 5, N_ITEMS = 4, N_ELEM = N_WG * N_ITEMS, N_ROWS = 6 };
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
    if (vk_kernel_variant(t->dev, t->k, options_of(&t->k->ir, c, t->k->opt), &v) != BURNC_OK)
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
static burnc_status_t tune_buffers(tune_ctx *t, rt_buffer *const *ins, rt_buffer *const *outs, bool alloc)
{
    const kir_kernel *k = &t->k->ir;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        rt_buffer **slot = s < k->n_inputs ? &t->ins[s] : &t->outs[s - k->n_inputs];
        if (!alloc) {
            if (*slot)
                t->dev->be->free(t->dev, *slot);
            continue;
        }
        size_t size = s < k->n_inputs ? ins[s]->size : outs[s - k->n_inputs]->size;
        RT_TRY(t->dev->be->alloc(t->dev, size, slot));
    }
    return BURNC_OK;
}

burnc_status_t vk_tune_choose(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                              rt_buffer *const *outs, rt_kernel **out)
{
    call_once(&init_once, init);
    const kir_kernel *ir = &k->ir;
    bool elem = is_elementwise(ir);
    int64_t rows = 1, row_len = 1;
    for (int d = 0; d < ir->rank; d++)
        *(d < ir->n_outer ? &rows : &row_len) *= args->extents[d];
    at_buckets bk = at_get_buckets();
    char key[96];
    if (elem)
        snprintf(key, sizeof key, "%016llx n%lld", (unsigned long long)k->key, (long long)at_bucket(rows, bk));
    else
        snprintf(key, sizeof key, "%016llx r%lld x%lld", (unsigned long long)k->key, (long long)at_bucket(rows, bk),
                 (long long)at_bucket(row_len, bk));
    /* heuristic: 256 invocations of 4 positions; rows: 8 warps (cg_glsl_resolve's defaults) */
    int heuristic = elem ? 2 * N_ITEMS + 2 : 3;
    at_query q = {.fingerprint = vk_dev(dev)->fingerprint, .family = elem ? &fam_elem : &fam_rows, .key = key,
                  .heuristic = heuristic};
    tune_ctx t = {.dev = dev, .k = k, .args = args};
    at_time_fn timer = NULL;
    if (at_get_mode() == AT_MODE_ON) {
        rt_error_state saved;
        rt_error_save(&saved);
        if (tune_buffers(&t, ins, outs, true) == BURNC_OK) {
            timer = time_candidate;
        } else { /* no room for private buffers: the heuristic */
            tune_buffers(&t, ins, outs, false);
            rt_error_restore(&saved);
        }
    }
    int c = at_decide(&q, timer, &t, NULL);
    if (timer)
        tune_buffers(&t, ins, outs, false);
    return vk_kernel_variant(dev, k, options_of(ir, c, k->opt), out);
}
