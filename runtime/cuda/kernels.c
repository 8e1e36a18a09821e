/* Compiled kernels of the cuda device: a memory cache by structure and options, the disk cache
 * of PTX and linked cubins, PTX from the LLVM module (loaded only on a full miss, so a warm
 * process never maps LLVM), and the launches the planner (codegen/ptx_plan.c) lays out, run
 * directly or, with BURNC_CUDA_GRAPHS=1, replayed as CUDA graphs. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "burnc_config.h"
#include "codegen/kcache.h"
#include "cu.h"

#ifdef BURNC_LLVM_VERSION
#define COMPILER_ID "llvm-" BURNC_LLVM_VERSION
#else
#define COMPILER_ID "llvm-19"
#endif

/* Dynamic shared memory past this needs the function's limit raised first. */
enum { DEFAULT_SHARED_LIMIT = 48 << 10, LOG_CAP = 8192 };

/* ---- The memory cache ---- */

void cuda_kernel_cache_init(rt_device *dev)
{
    cuda_kernel_cache *c = &cuda_dev(dev)->kernels;
    memset(c, 0, sizeof *c);
    mtx_init(&c->lock, mtx_plain);
}

static void kernel_free(cuda_device *cd, rt_kernel *k)
{
    if (k->module && !atomic_load(&cd->lost))
        cd->cu->ModuleUnload(k->module);
    kir_free(&k->ir);
    free(k);
}

static void drop(rt_ktable_node *n, void *cd)
{
    kernel_free(cd, (rt_kernel *)n);
}

void cuda_kernel_cache_free(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    cuda_kernel_cache *c = &cd->kernels;
    kc_lazy_close(&c->disk);
    rt_ktable_clear(&c->table, drop, cd);
    mtx_destroy(&c->lock);
}

static bool same_slots(int rank, const kir_slot *x, const kir_slot *y, int n)
{
    for (int s = 0; s < n; s++)
        if (x[s].dtype != y[s].dtype || memcmp(x[s].stride, y[s].stride, (size_t)rank) != 0)
            return false;
    return true;
}

/* Structural equality over what kir_hash covers: a hash collision must not run another
 * kernel's code. */
static bool same_kernel(const kir_kernel *a, const kir_kernel *b)
{
    if (a->rank != b->rank || a->n_outer != b->n_outer || a->n_scalars != b->n_scalars ||
        a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_stages != b->n_stages ||
        a->n_stores != b->n_stores || a->n_insts != b->n_insts ||
        !same_slots(a->rank, a->inputs, b->inputs, a->n_inputs) ||
        !same_slots(a->rank, a->outputs, b->outputs, a->n_outputs) ||
        memcmp(a->in_place, b->in_place, (size_t)a->n_outputs) != 0)
        return false;
    for (int s = 0; s < a->n_stages; s++)
        if (a->stages[s].combiner != b->stages[s].combiner || a->stages[s].value != b->stages[s].value)
            return false;
    for (int s = 0; s < a->n_stores; s++)
        if (a->stores[s].slot != b->stores[s].slot || a->stores[s].value != b->stores[s].value ||
            a->stores[s].row != b->stores[s].row)
            return false;
    for (int i = 0; i < a->n_insts; i++) {
        const kir_inst *x = &a->insts[i], *y = &b->insts[i];
        if (x->op != y->op || x->type != y->type || x->a != y->a || x->b != y->b || x->c != y->c ||
            x->imm.u != y->imm.u)
            return false;
    }
    return true;
}

static bool same_options(const cg_ptx_options *a, const cg_ptx_options *b)
{
    return a->sm == b->sm && a->block == b->block && a->items == b->items && a->rows_per_block == b->rows_per_block;
}

static rt_kernel *lookup(cuda_kernel_cache *c, const kir_kernel *k, uint64_t key, const cg_ptx_options *opt)
{
    for (rt_ktable_node *n = rt_ktable_chain(&c->table, key); n; n = n->next) {
        rt_kernel *e = (rt_kernel *)n;
        if (n->key == key && same_options(&e->opt, opt) && same_kernel(&e->ir, k))
            return e;
    }
    return NULL;
}

/* ---- Loading PTX ---- */

/* The driver's log, one line, for a message. */
static const char *log_line(char *log)
{
    for (char *p = log; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return log[0] ? log : "(no log)";
}

burnc_status_t cuda_module_from_ptx(rt_device *dev, const char *ptx, CUmodule *out, void **cubin, size_t *cubin_size)
{
    cuda_device *cd = cuda_dev(dev);
    const cuda_driver *cu = cd->cu;
    char *elog = calloc(2, LOG_CAP);
    if (!elog)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory for the PTX loader's log", dev->spec);
    char *ilog = elog + LOG_CAP;
    int opts[4] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                   CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *vals[4] = {elog, (void *)(uintptr_t)(LOG_CAP - 1), ilog, (void *)(uintptr_t)(LOG_CAP - 1)};
    const char *step;
    CUresult r;
    if (cubin) {
        /* the linker gives the cubin the disk cache keeps: a warm process skips the driver's JIT */
        CUlinkState link = NULL;
        void *image = NULL;
        size_t size = 0;
        *cubin = NULL;
        step = "cuLinkCreate";
        r = cu->LinkCreate(4, opts, vals, &link);
        if (r == CUDA_SUCCESS)
            step = "cuLinkAddData", r = cu->LinkAddData(link, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1,
                                                        "burnc.ptx", 0, NULL, NULL);
        if (r == CUDA_SUCCESS)
            step = "cuLinkComplete", r = cu->LinkComplete(link, &image, &size);
        if (r == CUDA_SUCCESS)
            step = "cuModuleLoadData", r = cu->ModuleLoadData(out, image);
        if (r == CUDA_SUCCESS && (*cubin = malloc(size)) != NULL) {
            memcpy(*cubin, image, size); /* the image belongs to the link state */
            *cubin_size = size;
        }
        if (link)
            cu->LinkDestroy(link);
    } else {
        step = "cuModuleLoadDataEx";
        r = cu->ModuleLoadDataEx(out, ptx, 4, opts, vals);
    }
    burnc_status_t s = BURNC_OK;
    if (r != CUDA_SUCCESS) {
        char text[180];
        burnc_status_t code = cuda_status_of(r);
        /* whatever the driver says of code it rejects is a compile error; a lost device or
         * memory is not */
        if (code != BURNC_ERR_DEVICE_LOST && code != BURNC_ERR_OUT_OF_MEMORY)
            code = BURNC_ERR_COMPILE;
        if (code == BURNC_ERR_DEVICE_LOST)
            s = cuda_check(dev, r, step);
        else
            s = rt_fail(code, "%s: %s rejected the PTX: %s: %.300s", dev->spec, step,
                        cuda_error_text(r, text, sizeof text), log_line(elog));
    } else if (ilog[0] && rt_log_enabled("codegen")) {
        rt_log("codegen", "%s: %s: %s", dev->spec, step, log_line(ilog));
    }
    free(elog);
    return s;
}

burnc_status_t cuda_test_load_ptx(rt_device *dev, const char *ptx, bool link)
{
    RT_TRY(cuda_enter(dev, "cuda_test_load_ptx"));
    CUmodule mod = NULL;
    void *cubin = NULL;
    size_t size = 0;
    burnc_status_t s = cuda_module_from_ptx(dev, ptx, &mod, link ? &cubin : NULL, &size);
    free(cubin);
    if (s == BURNC_OK)
        cuda_dev(dev)->cu->ModuleUnload(mod);
    return s;
}

burnc_status_t cuda_test_illegal_address(rt_device *dev)
{
    static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                              ".visible .entry burnc_fault()\n{\n.reg .b64 %rd<2>;\n.reg .b32 %r<2>;\n"
                              "mov.u64 %rd1, 8;\nmov.u32 %r1, 1;\nst.global.u32 [%rd1], %r1;\nret;\n}\n";
    RT_TRY(cuda_enter(dev, "cuda_test_illegal_address"));
    cuda_device *cd = cuda_dev(dev);
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    RT_TRY(cuda_module_from_ptx(dev, ptx, &mod, NULL, NULL));
    burnc_status_t s = cuda_check(dev, cd->cu->ModuleGetFunction(&fn, mod, "burnc_fault"), "cuModuleGetFunction");
    mtx_lock(&cd->lock);
    if (s == BURNC_OK)
        s = cuda_batch_submit_locked(dev);
    if (s == BURNC_OK)
        s = cuda_check(dev, cd->cu->LaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, cd->stream, NULL, NULL), "cuLaunchKernel");
    if (s == BURNC_OK)
        s = cuda_wait_locked(dev, "cuda_test_illegal_address");
    mtx_unlock(&cd->lock);
    if (!atomic_load(&cd->lost))
        cd->cu->ModuleUnload(mod);
    return s;
}

/* ---- Building one kernel ---- */

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static bool copy_ir(kir_kernel *dst, const kir_kernel *src)
{
    *dst = *src;
    dst->insts = NULL;
    dst->cap_insts = dst->n_insts;
    if (src->n_insts > 0) {
        dst->insts = malloc((size_t)src->n_insts * sizeof *dst->insts);
        if (!dst->insts)
            return false;
        memcpy(dst->insts, src->insts, (size_t)src->n_insts * sizeof *dst->insts);
    }
    return true;
}

/* BURNC_DUMP_DIR: <name>-<key>.kir and .ptx. */
static void dump(const char *name, uint64_t key, const char *ext, const char *text)
{
    const char *dir = getenv("BURNC_DUMP_DIR");
    if (!dir || !*dir || !text)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s-%016llx.%s", dir, name[0] ? name : "kernel", (unsigned long long)key, ext);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    } else {
        rt_log("codegen", "cannot write %s: %s", path, strerror(errno));
    }
}

static kc_cache *disk_cache(cuda_kernel_cache *c)
{
    mtx_lock(&c->lock);
    kc_cache *d = kc_lazy_open(&c->disk);
    mtx_unlock(&c->lock);
    return d;
}

/* PTX from the LLVM module (malloc'ed, NUL-terminated). */
static burnc_status_t generate_ptx(rt_device *dev, const rt_kernel *k, char **ptx, size_t *size)
{
    const cg_llvm_api *api = rt_llvm_api();
    if (!api) {
        char why[400]; /* the last error is the format's destination: copy it first */
        snprintf(why, sizeof why, "%s", burnc_error_message());
        return rt_fail(BURNC_ERR_UNAVAILABLE, "%s: %s: no code generator: %s", dev->spec, k->ir.name, why);
    }
    cg_ptx_luts luts;
    if (!cg_ptx_luts_make(&k->ir, &luts))
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: %s: no memory for its 16-bit tables", dev->spec, k->ir.name);
    char err[1024] = "";
    bool ok = api->compile_ptx(&k->ir, &k->opt, &luts, ptx, size, err, sizeof err);
    cg_ptx_luts_free(&luts);
    if (!ok)
        return rt_fail(BURNC_ERR_COMPILE, "%s: generating PTX for %s failed: %s", dev->spec, k->ir.name, err);
    return BURNC_OK;
}

/* The cubin of an earlier process; a damaged one is logged and built again. */
static bool load_cubin(rt_device *dev, kc_cache *disk, uint64_t disk_key, rt_kernel *k)
{
    void *image;
    size_t size;
    if (!disk || !kc_get(disk, disk_key, &image, &size))
        return false;
    CUresult r = cuda_dev(dev)->cu->ModuleLoadData(&k->module, image);
    free(image);
    if (r != CUDA_SUCCESS) {
        char text[180];
        rt_log("codegen", "%s: cached cubin unusable (%s): building again", k->ir.name,
               cuda_error_text(r, text, sizeof text));
        k->module = NULL;
    }
    return r == CUDA_SUCCESS;
}

/* The cached PTX, else LLVM's (stored), then the driver's linker (its cubin stored). */
static burnc_status_t build_module(rt_device *dev, kc_cache *disk, uint64_t ptx_key, uint64_t cubin_key, rt_kernel *k,
                                   const char **how)
{
    char *ptx = NULL;
    size_t size = 0;
    void *cached;
    *how = "PTX from the disk cache, linked by the driver";
    if (disk && kc_get(disk, ptx_key, &cached, &size)) {
        if (size > 0 && ((char *)cached)[size - 1] == '\0')
            ptx = cached;
        else
            free(cached);
    }
    if (!ptx) {
        *how = "PTX from LLVM, linked by the driver";
        RT_TRY(generate_ptx(dev, k, &ptx, &size));
        if (!ptx)
            return rt_fail(BURNC_ERR_INTERNAL, "%s: the code generator gave no PTX for %s", dev->spec, k->ir.name);
        if (disk)
            kc_put(disk, ptx_key, ptx, strlen(ptx) + 1);
    }
    dump(k->ir.name, k->node.key, "ptx", ptx);
    void *cubin = NULL;
    size_t cubin_size = 0;
    burnc_status_t s = cuda_module_from_ptx(dev, ptx, &k->module, &cubin, &cubin_size);
    if (s == BURNC_OK && cubin && disk)
        kc_put(disk, cubin_key, cubin, cubin_size);
    free(cubin);
    free(ptx);
    return s;
}

static burnc_status_t build(rt_device *dev, const kir_kernel *k, uint64_t key, const cg_ptx_options *opt,
                            rt_kernel **out)
{
    cuda_device *cd = cuda_dev(dev);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rt_kernel *nk = calloc(1, sizeof *nk);
    if (!nk || !copy_ir(&nk->ir, k)) {
        free(nk);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory for kernel %s", dev->spec, k->name);
    }
    nk->kind = CUDA_KERNEL_COMPILED;
    nk->node.key = key;
    nk->opt = *opt;
    const char *dump_dir = getenv("BURNC_DUMP_DIR");
    if (dump_dir && *dump_dir) {
        char *text = kir_print(k);
        dump(k->name, key, "kir", text);
        free(text);
    }
    /* PTX depends on the kernel, the options and the compute capability; the cubin also on the
     * driver that assembled it */
    uint64_t h = kc_hash(opt, sizeof *opt, key);
    char ptx_target[64], cubin_target[96];
    snprintf(ptx_target, sizeof ptx_target, "cuda-ptx sm_%d", cd->cc);
    snprintf(cubin_target, sizeof cubin_target, "cuda-cubin sm_%d driver %d", cd->cc, cd->driver_version);
    uint64_t ptx_key = kc_key(h, ptx_target, COMPILER_ID), cubin_key = kc_key(h, cubin_target, COMPILER_ID);
    kc_cache *disk = disk_cache(&cd->kernels);
    const char *how = "";
    burnc_status_t s = BURNC_OK;
    bool from_disk = load_cubin(dev, disk, cubin_key, nk);
    if (!from_disk)
        s = build_module(dev, disk, ptx_key, cubin_key, nk, &how);
    if (s != BURNC_OK) {
        kernel_free(cd, nk);
        return s;
    }
    /* the cpu device's wording, which burnc-bench counts */
    if (from_disk)
        rt_log("codegen", "%s %016llx: disk hit, cubin loaded in %.2f ms (block %d, items %d, rows %d)", k->name,
               (unsigned long long)key, ms_since(&t0), opt->block, opt->items, opt->rows_per_block);
    else
        rt_log("codegen", "%s %016llx: miss, compiled in %.2f ms (%s; block %d, items %d, rows %d)", k->name,
               (unsigned long long)key, ms_since(&t0), how, opt->block, opt->items, opt->rows_per_block);
    mtx_lock(&cd->kernels.lock);
    rt_kernel *raced = lookup(&cd->kernels, k, key, opt);
    bool ok = raced || rt_ktable_insert(&cd->kernels.table, &nk->node);
    mtx_unlock(&cd->kernels.lock);
    if (raced || !ok)
        kernel_free(cd, nk);
    if (!ok)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory for the kernel cache", dev->spec);
    *out = raced ? raced : nk;
    return BURNC_OK;
}

burnc_status_t cuda_kernel_get(rt_device *dev, const kir_kernel *k, uint64_t key, const cg_ptx_options *opt,
                               rt_kernel **out)
{
    cuda_kernel_cache *c = &cuda_dev(dev)->kernels;
    mtx_lock(&c->lock);
    rt_kernel *hit = lookup(c, k, key, opt);
    mtx_unlock(&c->lock);
    /* a hit calls no driver: the launch that follows makes the context current, once per
     * launch of a flush instead of twice (a lost device is refused all the same) */
    if (hit && !atomic_load(&cuda_dev(dev)->lost)) {
        *out = hit;
        return BURNC_OK;
    }
    RT_TRY(cuda_enter(dev, k->name));
    return build(dev, k, key, opt, out);
}

/* ---- Launching ---- */

/* The entry's function, looked up once per kernel (the stream lock held). */
static burnc_status_t entry_fn(rt_device *dev, rt_kernel *k, const cg_ptx_launch *l, CUfunction *out)
{
    cuda_device *cd = cuda_dev(dev);
    cuda_entry *e = NULL;
    for (int i = 0; i < k->n_entries && !e; i++)
        if (strncmp(k->entries[i].name, l->entry, sizeof l->entry) == 0)
            e = &k->entries[i];
    if (!e) {
        if (k->n_entries == CG_PTX_MAX_LAUNCHES)
            return rt_fail(BURNC_ERR_INTERNAL, "%s: more than %d entries", k->ir.name, CG_PTX_MAX_LAUNCHES);
        e = &k->entries[k->n_entries];
        memset(e, 0, sizeof *e);
        memcpy(e->name, l->entry, sizeof l->entry); /* one byte more than the entry: always terminated */
        char what[96];
        snprintf(what, sizeof what, "cuModuleGetFunction(%s) of %.40s", e->name, k->ir.name);
        RT_TRY(cuda_check(dev, cd->cu->ModuleGetFunction(&e->fn, k->module, e->name), what));
        k->n_entries++;
    }
    if (l->shared_bytes > DEFAULT_SHARED_LIMIT && l->shared_bytes > e->shared_set) {
        if ((int)l->shared_bytes > cd->max_shared_optin)
            return rt_fail(BURNC_ERR_EXECUTION, "%s: %s wants %u bytes of shared memory, the device has %d",
                           dev->spec, e->name, l->shared_bytes, cd->max_shared_optin);
        RT_TRY(cuda_check(dev, cd->cu->FuncSetAttribute(e->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                        (int)l->shared_bytes), "cuFuncSetAttribute"));
        e->shared_set = l->shared_bytes;
    }
    *out = e->fn;
    return BURNC_OK;
}

static burnc_status_t launch_now(rt_device *dev, CUfunction fn, const uint32_t *grid, const uint32_t *block,
                                 uint32_t shared, const uint64_t *words, uint32_t n_words, const char *name)
{
    size_t size = (size_t)n_words * sizeof *words;
    /* the driver copies the parameter block at the call */
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)words, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    return cuda_launch_fn(dev, fn, grid, block, shared, NULL, extra, "cuLaunchKernel", name);
}

/* Directly, or into the batch (graphs on), which is submitted when full. */
static burnc_status_t enqueue_locked(rt_device *dev, CUfunction fn, const cg_ptx_launch *l, const char *name)
{
    cuda_device *cd = cuda_dev(dev);
    if (!cd->graphs)
        return launch_now(dev, fn, l->grid, l->block, l->shared_bytes, l->words, l->n_words, name);
    if (cd->n_pending == CUDA_GRAPH_BATCH)
        RT_TRY(cuda_batch_submit_locked(dev));
    if (!cd->words || cd->cap_words - cd->n_words < l->n_words) {
        /* one array for the batch's words, not a malloc and free per launch */
        size_t cap = cd->cap_words ? 2 * cd->cap_words : 1024;
        while (cap - cd->n_words < l->n_words)
            cap *= 2;
        uint64_t *words = realloc(cd->words, cap * sizeof *words);
        if (!words)
            return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory for a launch", dev->spec);
        cd->words = words;
        cd->cap_words = cap;
    }
    cuda_pending *p = &cd->pending[cd->n_pending];
    p->first_word = cd->n_words;
    memcpy(cd->words + cd->n_words, l->words, l->n_words * sizeof *cd->words);
    cd->n_words += l->n_words;
    p->fn = fn;
    memcpy(p->grid, l->grid, sizeof p->grid);
    memcpy(p->block, l->block, sizeof p->block);
    p->shared = l->shared_bytes;
    p->n_words = l->n_words;
    cd->n_pending++;
    return BURNC_OK;
}

/* The kernel's name and extents, for the profile (only when it is on: no formatting otherwise). */
static void profile_name(const cuda_device *cd, const kir_kernel *k, const kir_args *args, char *out, size_t size)
{
    out[0] = 0;
    if (!cd->profile)
        return;
    int n = snprintf(out, size, "%s [", k->name);
    for (int d = 0; d < k->rank && n > 0 && (size_t)n < size; d++)
        n += snprintf(out + n, size - (size_t)n, d ? "x%lld" : "%lld", (long long)args->extents[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(out + n, size - (size_t)n, "]");
}

burnc_status_t cuda_kernel_run(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                               rt_buffer *const *outs)
{
    cuda_device *cd = cuda_dev(dev);
    void *in_ptr[KIR_MAX_INPUTS], *out_ptr[KIR_MAX_OUTPUTS];
    for (int i = 0; i < k->ir.n_inputs; i++)
        in_ptr[i] = (void *)(uintptr_t)cuda_ptr(ins[i]);
    for (int o = 0; o < k->ir.n_outputs; o++)
        out_ptr[o] = (void *)(uintptr_t)cuda_ptr(outs[o]);
    kir_args a = *args;
    a.inputs = in_ptr;
    a.outputs = out_ptr;
    a.stream = 0;
    /* one plan buffer per device (64 KiB: not worth a malloc per launch) */
    mtx_lock(&cd->plan_lock);
    cg_ptx_plan *plan = cd->plan;
    char why[256] = "";
    rt_buffer *scratch = NULL;
    burnc_status_t s = BURNC_OK;
    if (!cg_ptx_plan_launches(&k->ir, &k->opt, &a, 0, plan, why, sizeof why))
        s = rt_fail(BURNC_ERR_EXECUTION, "%s: %s: cannot launch: %s", dev->spec, k->ir.name, why);
    /* scratch comes from the pool before the stream lock is taken: a full pool trims, and
     * freeing waits on the stream */
    if (s == BURNC_OK && plan->scratch_bytes) {
        s = rt_pool_alloc(dev, plan->scratch_bytes, &scratch);
        if (s == BURNC_OK && !cg_ptx_plan_launches(&k->ir, &k->opt, &a, cuda_ptr(scratch), plan, why, sizeof why))
            s = rt_fail(BURNC_ERR_EXECUTION, "%s: %s: cannot launch: %s", dev->spec, k->ir.name, why);
    }
    char name[160];
    profile_name(cd, &k->ir, args, name, sizeof name);
    mtx_lock(&cd->lock);
    for (int i = 0; i < plan->n && s == BURNC_OK; i++) {
        const cg_ptx_launch *l = &plan->launch[i];
        if (!l->grid[0] || !l->grid[1] || !l->grid[2])
            continue; /* an empty domain */
        CUfunction fn = NULL;
        s = entry_fn(dev, k, l, &fn);
        if (s == BURNC_OK)
            s = enqueue_locked(dev, fn, l, name);
    }
    mtx_unlock(&cd->lock);
    /* stream-ordered: whoever takes the scratch next runs after these launches */
    if (scratch)
        rt_pool_free(dev, scratch);
    mtx_unlock(&cd->plan_lock);
    return s;
}

/* ---- CUDA graphs ---- */

static uint64_t batch_hash(const cuda_device *cd)
{
    uint64_t h = (uint64_t)cd->n_pending;
    for (int i = 0; i < cd->n_pending; i++) {
        const cuda_pending *p = &cd->pending[i];
        uint64_t head[6] = {(uint64_t)(uintptr_t)p->fn, p->grid[0] | (uint64_t)p->grid[1] << 32,
                            p->grid[2] | (uint64_t)p->block[0] << 32, p->block[1] | (uint64_t)p->block[2] << 32,
                            p->shared, p->n_words};
        h = kc_hash(head, sizeof head, h);
        h = kc_hash(cd->words + p->first_word, p->n_words * sizeof *cd->words, h);
    }
    return h;
}

static burnc_status_t launch_batch(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    for (int i = 0; i < cd->n_pending; i++) {
        const cuda_pending *p = &cd->pending[i];
        RT_TRY(launch_now(dev, p->fn, p->grid, p->block, p->shared, cd->words + p->first_word, p->n_words,
                          "a batch"));
    }
    return BURNC_OK;
}

/* Captures the batch into a graph; NULL when capture fails (the batch then runs directly). */
static CUgraphExec capture(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    const cuda_driver *cu = cd->cu;
    if (cu->StreamBeginCapture(cd->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS)
        return NULL;
    rt_error_state saved;
    rt_error_save(&saved);
    bool ok = launch_batch(dev) == BURNC_OK;
    rt_error_restore(&saved);
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    /* capture must end whatever happened, or the stream stays in capture mode */
    if (cu->StreamEndCapture(cd->stream, &graph) != CUDA_SUCCESS)
        ok = false;
    if (ok && cu->GraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS)
        exec = NULL;
    if (graph)
        cu->GraphDestroy(graph);
    return exec;
}

static void keep_graph(cuda_device *cd, uint64_t hash, CUgraphExec exec)
{
    int slot = -1;
    for (int i = 0; i < CUDA_GRAPHS_KEPT && slot < 0; i++)
        if (!cd->kept[i].exec)
            slot = i;
    if (slot < 0) { /* full: the least recently used goes */
        slot = 0;
        for (int i = 1; i < CUDA_GRAPHS_KEPT; i++)
            if (cd->kept[i].last_use < cd->kept[slot].last_use)
                slot = i;
        cd->cu->GraphExecDestroy(cd->kept[slot].exec);
    }
    cd->kept[slot] = (cuda_graph){.hash = hash, .exec = exec, .last_use = ++cd->graph_clock};
}

/* A batch seen once before is captured on its second submission and replayed from then on:
 * identical words mean the same kernels on the same device addresses with the same extents,
 * which this batch holds right now, so a replay is exactly this batch's work. */
burnc_status_t cuda_batch_submit_locked(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    if (!cd->n_pending)
        return BURNC_OK;
    RT_TRY(cuda_timer_first_launch(dev)); /* before a capture, which must not hold it */
    uint64_t h = batch_hash(cd);
    burnc_status_t s = BURNC_OK;
    cuda_graph *g = NULL;
    for (int i = 0; i < CUDA_GRAPHS_KEPT && !g; i++)
        if (cd->kept[i].exec && cd->kept[i].hash == h)
            g = &cd->kept[i];
    bool seen = false;
    for (int i = 0; i < cd->n_seen && !seen; i++)
        seen = cd->seen[i] == h;
    if (!g && seen && cd->n_pending > 1) {
        CUgraphExec exec = capture(dev);
        if (exec) {
            keep_graph(cd, h, exec);
            cd->graph_captures++;
            for (int i = 0; i < CUDA_GRAPHS_KEPT && !g; i++)
                if (cd->kept[i].exec == exec)
                    g = &cd->kept[i];
        }
    }
    if (g) {
        g->last_use = ++cd->graph_clock;
        s = cuda_check(dev, cd->cu->GraphLaunch(g->exec, cd->stream), "cuGraphLaunch");
        if (s == BURNC_OK)
            cd->graph_replays++;
    } else {
        if (!seen)
            cd->seen[cd->n_seen < CUDA_GRAPH_SEEN ? cd->n_seen++ : (int)(h % CUDA_GRAPH_SEEN)] = h;
        s = launch_batch(dev);
    }
    cd->n_pending = 0;
    cd->n_words = 0;
    return s;
}

void cuda_graphs_free(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    free(cd->words);
    cd->words = NULL;
    cd->n_pending = 0;
    cd->n_words = cd->cap_words = 0;
    for (int i = 0; i < CUDA_GRAPHS_KEPT; i++)
        if (cd->kept[i].exec && !atomic_load(&cd->lost))
            cd->cu->GraphExecDestroy(cd->kept[i].exec);
    memset(cd->kept, 0, sizeof cd->kept);
}
