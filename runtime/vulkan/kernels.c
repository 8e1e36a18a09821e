/* Vulkan kernels: kernel IR -> GLSL -> SPIR-V (disk-cached by a key of the GLSL text and the
 * device) -> compute pipelines (through a VkPipelineCache kept in the cache directory), their
 * launches; float matmuls through a tiled shader; other opaque records (index ops, cat, pad,
 * integer matmul) on the host with the reference kernels, on mapped or staged copies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kcache.h"
#include "vk.h"

/* ---- Layouts by signature ---- */

static burnc_status_t layouts_for(vk_device *vd, int n)
{
    if (vd->pipe_layout[n])
        return BURNC_OK;
    VkDescriptorSetLayoutBinding b[VK_MAX_BINDINGS];
    for (int i = 0; i < n; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = (uint32_t)n, .pBindings = b};
    VkResult r = vd->api.vkCreateDescriptorSetLayout(vd->dev, &li, NULL, &vd->set_layout[n]);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_COMPILE, "vkCreateDescriptorSetLayout of %d bindings", n);
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                     .pSetLayouts = &vd->set_layout[n]};
    r = vd->api.vkCreatePipelineLayout(vd->dev, &pi, NULL, &vd->pipe_layout[n]);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_COMPILE, "vkCreatePipelineLayout of %d bindings", n);
    return BURNC_OK;
}

/* ---- The pipeline cache file ---- */

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n > 0 && n < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) &&
        fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *size = data ? (size_t)n : 0;
    return data;
}

/* <cache dir>/vulkan/<fingerprint hash>.pipelines, in a directory burnc trusts; NULL if none. */
static char *pipeline_cache_path(const vk_device *vd)
{
    char why[256];
    char *dir = kc_cache_dir(why, sizeof why);
    char *sub = dir ? kc_path_join(dir, "vulkan") : NULL;
    bool writable;
    char *path = NULL;
    if (sub && kc_make_dirs(sub) && kc_dir_trusted(sub, &writable, why, sizeof why)) {
        char name[64];
        snprintf(name, sizeof name, "%016llx.pipelines",
                 (unsigned long long)kc_hash(vd->fingerprint, strlen(vd->fingerprint), 0));
        path = kc_path_join(sub, name);
    } else {
        rt_log("runtime", "vulkan: no pipeline cache file: %s", why);
    }
    free(sub);
    free(dir);
    return path;
}

/* The driver checks the header (vendor, device, cache UUID) and ignores foreign data. */
burnc_status_t vk_kernels_init(rt_device *dev)
{
    vk_device *vd = vk_dev(dev);
    vd->pipe_cache_path = pipeline_cache_path(vd);
    size_t size = 0;
    char *data = vd->pipe_cache_path ? read_file(vd->pipe_cache_path, &size) : NULL;
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, .initialDataSize = size,
                                    .pInitialData = data};
    VkResult r = vd->api.vkCreatePipelineCache(vd->dev, &ci, NULL, &vd->pipe_cache);
    if (r != VK_SUCCESS && data) {
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vd->api.vkCreatePipelineCache(vd->dev, &ci, NULL, &vd->pipe_cache);
        size = 0;
    }
    free(data);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_UNAVAILABLE, "vkCreatePipelineCache");
    vd->pipe_cache_loaded = size > 0;
    rt_log("codegen", "%s: pipeline cache %s (%zu bytes)", dev->spec,
           vd->pipe_cache_path ? vd->pipe_cache_path : "(none)", size);
    return BURNC_OK;
}

void vk_save_pipeline_cache(vk_device *vd)
{
    vd->saved_pipelines = vd->pipelines;
    size_t size = 0;
    if (!vd->pipe_cache_path || vd->api.vkGetPipelineCacheData(vd->dev, vd->pipe_cache, &size, NULL) != VK_SUCCESS ||
        !size)
        return;
    char *data = malloc(size);
    char *tmp = malloc(strlen(vd->pipe_cache_path) + 32);
    if (data && tmp && vd->api.vkGetPipelineCacheData(vd->dev, vd->pipe_cache, &size, data) == VK_SUCCESS) {
        /* write then rename: another process reads a whole file or none */
        sprintf(tmp, "%s.%ld.tmp", vd->pipe_cache_path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        bool ok = f && fwrite(data, 1, size, f) == size;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok || rename(tmp, vd->pipe_cache_path) != 0) {
            rt_log("codegen", "vulkan: cannot write %s", vd->pipe_cache_path);
            remove(tmp);
        }
    }
    free(tmp);
    free(data);
}

void vk_kernels_free(rt_device *dev)
{
    vk_device *vd = vk_dev(dev);
    if (vd->pipe_cache) {
        vk_save_pipeline_cache(vd);
        vd->api.vkDestroyPipelineCache(vd->dev, vd->pipe_cache, NULL);
    }
    for (rt_kernel *k = vd->kernels, *next; k; k = next) {
        next = k->next;
        vd->api.vkDestroyPipeline(vd->dev, k->pipeline, NULL);
        kir_free(&k->ir);
        free(k);
    }
    vd->kernels = NULL;
    if (vd->scratch)
        dev->be->free(dev, vd->scratch);
    vd->scratch = NULL;
    for (int n = 0; n <= VK_MAX_BINDINGS; n++) {
        if (vd->pipe_layout[n])
            vd->api.vkDestroyPipelineLayout(vd->dev, vd->pipe_layout[n], NULL);
        if (vd->set_layout[n])
            vd->api.vkDestroyDescriptorSetLayout(vd->dev, vd->set_layout[n], NULL);
    }
    kc_lazy_close(&vd->disk);
    free(vd->pipe_cache_path);
}

/* ---- Compiling ---- */

static void dump(const kir_kernel *k, uint64_t key, const char *glsl)
{
    const char *dir = getenv("BURNC_DUMP_DIR");
    if (!dir || !*dir)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%016llx.comp", dir, k->name, (unsigned long long)key);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(glsl, f);
        fclose(f);
    }
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* SPIR-V for the GLSL: the disk cache, else glslang (then stored). Called with vd->lock held.
 * Logs as the cpu device does ("disk hit", "miss, compiled"): tests count kernels built. */
static burnc_status_t spirv_for(vk_device *vd, const char *name, const char *glsl, uint32_t **words, size_t *n)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t key = kc_key(kc_hash(glsl, strlen(glsl), 0), vd->fingerprint, cg_glsl_compiler());
    kc_cache *disk = kc_lazy_open(&vd->disk);
    void *data;
    size_t size;
    if (disk && kc_get(disk, key, &data, &size)) {
        if (size % 4 == 0 && size > 0) {
            *words = data;
            *n = size / 4;
            rt_log("codegen", "%s %016llx: disk hit, loaded in %.2f ms", name, (unsigned long long)key,
                   ms_since(&t0));
            return BURNC_OK;
        }
        free(data);
    }
    RT_TRY(cg_glsl_compile(name, glsl, words, n));
    rt_log("codegen", "%s %016llx: miss, compiled in %.2f ms (GLSL -> SPIR-V)", name, (unsigned long long)key,
           ms_since(&t0));
    if (disk)
        kc_put(disk, key, *words, *n * 4);
    return BURNC_OK;
}

static burnc_status_t make_pipeline(vk_device *vd, int n_bindings, const uint32_t *words, size_t n, const char *name,
                                    VkPipeline *out)
{
    RT_TRY(layouts_for(vd, n_bindings));
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = n * 4,
                                   .pCode = words};
    VkShaderModule mod;
    VkResult r = vd->api.vkCreateShaderModule(vd->dev, &mi, NULL, &mod);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_COMPILE, "vkCreateShaderModule for %s", name);
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod, .pName = "main"},
        .layout = vd->pipe_layout[n_bindings]};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = vd->api.vkCreateComputePipelines(vd->dev, vd->pipe_cache, 1, &ci, NULL, out);
    rt_log("codegen", "%s: pipeline made in %.2f ms", name, ms_since(&t0));
    vd->api.vkDestroyShaderModule(vd->dev, mod, NULL);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_COMPILE, "vkCreateComputePipelines for %s", name);
    vd->pipelines++;
    return BURNC_OK;
}

/* The pipeline of rk, made on its first launch: the kernel a flush compiles is only the
 * structure its launches pick variants of (workgroup sizes by autotune and by row length), so
 * a variant never launched costs no shader compile. */
static burnc_status_t pipeline_ready(vk_device *vd, rt_kernel *rk)
{
    mtx_lock(&vd->lock);
    burnc_status_t s = BURNC_OK;
    if (!rk->pipeline) {
        const kir_kernel *k = &rk->ir;
        char *glsl = cg_glsl_emit(k, &rk->opt);
        uint32_t *words = NULL;
        size_t n = 0;
        s = glsl ? BURNC_OK : burnc_error_code();
        if (s == BURNC_OK) {
            dump(k, rk->key, glsl);
            s = spirv_for(vd, k->name, glsl, &words, &n);
        }
        if (s == BURNC_OK)
            s = make_pipeline(vd, rk->n_bindings, words, n, k->name, &rk->pipeline);
        free(words);
        free(glsl);
    }
    mtx_unlock(&vd->lock);
    return s;
}

/* Called with vd->lock held. */
static burnc_status_t build(rt_device *dev, const kir_kernel *k, uint64_t key, cg_glsl_options opt, rt_kernel **out)
{
    char why[256];
    if (!kir_valid(k, why, sizeof why))
        return rt_fail(BURNC_ERR_INTERNAL, "vulkan: invalid kernel %s: %s", k->name, why);
    for (int s = 0; s < k->n_inputs; s++)
        if (!dev->be->supports_dtype(dev, k->inputs[s].dtype))
            return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: %s cannot hold %s", k->name, dev->spec,
                           ir_dtype_name(k->inputs[s].dtype));
    for (int o = 0; o < k->n_outputs; o++)
        if (!dev->be->supports_dtype(dev, k->outputs[o].dtype))
            return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: %s cannot hold %s", k->name, dev->spec,
                           ir_dtype_name(k->outputs[o].dtype));
    rt_kernel *rk = calloc(1, sizeof *rk);
    if (!rk)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory", k->name);
    rk->key = key;
    rk->opt = cg_glsl_resolve(&opt);
    /* the passes' shader binds the scratch records too */
    rk->n_bindings = 1 + k->n_inputs + k->n_outputs + (rk->opt.passes && cg_glsl_multipass(k));
    /* a private copy of the instructions: the shader and the launch layout need them */
    rk->ir = *k;
    rk->ir.insts = malloc((size_t)(k->n_insts ? k->n_insts : 1) * sizeof *k->insts);
    if (!rk->ir.insts) {
        free(rk);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory", k->name);
    }
    memcpy(rk->ir.insts, k->insts, (size_t)k->n_insts * sizeof *k->insts);
    rk->ir.cap_insts = k->n_insts;
    *out = rk;
    return BURNC_OK;
}

static bool same_options(const cg_glsl_options *a, const cg_glsl_options *b)
{
    return a->wg_size == b->wg_size && a->items == b->items && a->no_f64 == b->no_f64 &&
           a->denorm32 == b->denorm32 && a->denorm64 == b->denorm64 && a->nan32 == b->nan32 && a->nan64 == b->nan64 &&
           a->fused32 == b->fused32 &&
           a->fused64 == b->fused64 && a->words8 == b->words8 && a->words16 == b->words16 &&
           a->subgroups == b->subgroups && a->passes == b->passes && a->wide == b->wide;
}

/* The kernel of this structure compiled with opt (memory, else built). */
static burnc_status_t kernel_get(rt_device *dev, const kir_kernel *k, uint64_t key, cg_glsl_options opt,
                                 rt_kernel **out)
{
    vk_device *vd = vk_dev(dev);
    opt = cg_glsl_resolve(&opt);
    mtx_lock(&vd->lock);
    rt_kernel *rk = vd->kernels;
    while (rk && !(rk->key == key && rk->ir.n_insts == k->n_insts && same_options(&rk->opt, &opt)))
        rk = rk->next;
    burnc_status_t s = BURNC_OK;
    if (!rk) {
        s = build(dev, k, key, opt, &rk);
        if (s == BURNC_OK) {
            rk->next = vd->kernels;
            vd->kernels = rk;
        }
    }
    mtx_unlock(&vd->lock);
    *out = rk;
    return s;
}

/* The code parameters every kernel of the device shares (autotune picks the rest). */
static cg_glsl_options base_options(const vk_device *vd)
{
    return (cg_glsl_options){.no_f64 = !vd->f64, .denorm32 = vd->denorm32, .denorm64 = vd->denorm64,
                             .nan32 = vd->nan32, .nan64 = vd->nan64,
                             .fused32 = vd->fused32, .fused64 = vd->fused64, .words8 = !vd->storage8,
                             .words16 = !vd->storage16, .subgroups = vd->subgroups};
}

burnc_status_t vk_compile_kernel(rt_device *dev, const kir_kernel *k, uint64_t key, rt_kernel **out)
{
    return kernel_get(dev, k, key, base_options(vk_dev(dev)), out);
}

/* out = fma(a, b, c) for values where one rounding and two differ; true when the device's own
 * fma gave the single rounding everywhere. Any failure says no (the exact software fma stays). */
static bool probe_fma(rt_device *dev, bool f64)
{
    enum { N = 64 };
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "probe_fma_%s", f64 ? "f64" : "f32");
    burnc_dtype_t dt = f64 ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
    kir_type t = f64 ? KIR_F64 : KIR_F32;
    int32_t v[3];
    for (int s = 0; s < 3; s++) {
        k.inputs[s] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_UNIT}};
        v[s] = kir_emit(&k, KIR_LOAD, t, s, 0, 0);
    }
    k.n_inputs = 3;
    k.n_outputs = 1;
    k.outputs[0] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_UNIT}};
    k.stores[0] = (kir_store){.slot = 0, .value = kir_emit(&k, KIR_FMA, t, v[0], v[1], v[2])};
    k.n_stores = 1;
    double host[4][N];
    float hostf[4][N];
    for (int i = 0; i < N; i++) {
        double a = 1.0 + (i + 1) * (f64 ? 0x1p-30 : 0x1p-12), b = 1.0 - (i + 1) * (f64 ? 0x1p-31 : 0x1p-13);
        if (f64) {
            host[0][i] = a, host[1][i] = b, host[2][i] = -(a * b), host[3][i] = fma(a, b, -(a * b));
        } else {
            float fa = (float)a, fb = (float)b, fc = -(fa * fb);
            hostf[0][i] = fa, hostf[1][i] = fb, hostf[2][i] = fc, hostf[3][i] = fmaf(fa, fb, fc);
        }
    }
    size_t es = f64 ? 8 : 4;
    rt_buffer *bufs[4] = {0};
    rt_kernel *rk = NULL;
    cg_glsl_options opt = base_options(vk_dev(dev));
    *(f64 ? &opt.fused64 : &opt.fused32) = true;
    bool ok = kernel_get(dev, &k, kir_hash(&k), opt, &rk) == BURNC_OK;
    for (int s = 0; s < 4 && ok; s++)
        ok = dev->be->alloc(dev, N * es, &bufs[s]) == BURNC_OK &&
             (s == 3 || dev->be->write(dev, bufs[s], 0, f64 ? (void *)host[s] : (void *)hostf[s], N * es) == BURNC_OK);
    int64_t n = N, zero[3] = {0}, one[3] = {1, 1, 1};
    kir_args a = {.extents = &n, .in_offsets = zero, .in_strides = one, .out_offsets = zero, .out_strides = one};
    double got[N];
    ok = ok && vk_launch_with(dev, rk, &a, bufs, &bufs[3]) == BURNC_OK &&
         dev->be->read(dev, bufs[3], 0, got, N * es) == BURNC_OK;
    ok = ok && memcmp(got, f64 ? (void *)host[3] : (void *)hostf[3], N * es) == 0;
    for (int s = 0; s < 4; s++)
        if (bufs[s])
            dev->be->free(dev, bufs[s]);
    kir_free(&k);
    return ok;
}

void vk_probe_fma(rt_device *dev)
{
    vk_device *vd = vk_dev(dev);
    rt_error_state saved;
    rt_error_save(&saved);
    vd->fused32 = vd->f64 && probe_fma(dev, false); /* without f64 the device's fma is all there is */
    vd->fused64 = vd->f64 && probe_fma(dev, true);
    rt_error_restore(&saved);
    rt_log("runtime", "%s: fma rounds once: f32 %s, f64 %s%s", dev->spec, vd->fused32 ? "yes" : "no",
           vd->fused64 ? "yes" : "no", vd->fused32 && vd->fused64 ? "" : " (exact in software where not)");
}

burnc_status_t vk_kernel_variant(rt_device *dev, rt_kernel *k, cg_glsl_options opt, rt_kernel **out)
{
    opt = cg_glsl_resolve(&opt);
    if (same_options(&opt, &k->opt)) {
        *out = k;
        return BURNC_OK;
    }
    return kernel_get(dev, &k->ir, k->key, opt, out);
}

burnc_status_t rt_vulkan_compile_glsl(const char *src)
{
    uint32_t *words;
    size_t n;
    burnc_status_t s = cg_glsl_compile("test shader", src, &words, &n);
    free(words);
    return s;
}

/* ---- Launching ---- */

/* Workgroup size and items per invocation from autotune (tune.c): each is its own pipeline. */
burnc_status_t vk_launch_kernel(rt_device *dev, rt_kernel *rk, const kir_args *args, rt_buffer *const *ins,
                                rt_buffer *const *outs, bool epilogue)
{
    (void)epilogue; /* matmuls run on the host: nothing to fuse into */
    if (rk->record)
        return rt_fail(BURNC_ERR_INTERNAL, "vulkan: launch_kernel of a record kernel");
    rt_kernel *v;
    RT_TRY(vk_tune_choose(dev, rk, args, ins, outs, &v));
    RT_TRY(vk_fit_rows(dev, v, args, &v));
    return vk_launch_with(dev, v, args, ins, outs);
}

burnc_status_t vk_fit_rows(rt_device *dev, rt_kernel *v, const kir_args *args, rt_kernel **out)
{
    *out = v;
    const kir_kernel *k = &v->ir;
    /* a row's stages keep one warp per leaf busy: warps past the row's leaves would only idle
     * and hold a GPU's slots (a workgroup per row). A CPU device has no such slots, and each
     * variant is a pipeline its compiler builds slowly. */
    if (k->n_stages == 0 || vk_dev(dev)->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
        return BURNC_OK;
    int64_t rows = 1, len = 1;
    for (int d = 0; d < k->rank; d++)
        *(d < k->n_outer ? &rows : &len) *= args->extents[d];
    int64_t leaves = (len + KIR_LEAF - 1) / KIR_LEAF, wg = 32;
    while (wg < 32 * leaves && wg < v->opt.wg_size)
        wg *= 2;
    bool passes = cg_glsl_multipass(k) && rows < VK_PASSES_ROWS && leaves >= VK_PASSES_LEAVES;
    if (passes || wg >= v->opt.wg_size)
        return BURNC_OK;
    cg_glsl_options o = v->opt;
    o.wg_size = (int)wg;
    return vk_kernel_variant(dev, v, o, out);
}

/* Scratch records of multi-pass reductions: one buffer per device, grown when a launch needs
 * more (queued dispatches may still use the old one: vk_free waits for them). */
static burnc_status_t scratch_reserve(rt_device *dev, size_t bytes)
{
    vk_device *vd = vk_dev(dev);
    if (vd->scratch && vd->scratch->size >= bytes)
        return BURNC_OK;
    size_t want = bytes < 65536 ? 65536 : bytes;
    if (vd->scratch)
        dev->be->free(dev, vd->scratch);
    vd->scratch = NULL;
    return dev->be->alloc(dev, want, &vd->scratch);
}

/* Workgroups (x, y) for `groups`, x at most 65535. */
static void grid_of(int64_t groups, uint32_t grid[2])
{
    int64_t x = groups < 65535 ? groups : 65535;
    grid[0] = (uint32_t)x;
    grid[1] = x ? (uint32_t)((groups + x - 1) / x) : 0;
}

/* One dispatch of rk with these argument words. */
static burnc_status_t dispatch(rt_device *dev, rt_kernel *rk, const int64_t *words, const uint32_t grid[2],
                               rt_buffer *const *ins, rt_buffer *const *outs)
{
    vk_device *vd = vk_dev(dev);
    const kir_kernel *k = &rk->ir;
    RT_TRY(pipeline_ready(vd, rk));
    if (grid[1] > 65535)
        return rt_fail(BURNC_ERR_EXECUTION, "vulkan: %s needs %u x %u workgroups, past the 65535 x 65535 grid",
                       k->name, grid[0], grid[1]);
    size_t bytes = cg_glsl_arg_words(k) * sizeof(int64_t);
    vk_batch *b;
    VkDeviceSize off;
    RT_TRY(vk_batch_get(vd, &b));
    if (vk_args_alloc(vd, b, bytes, &off) != BURNC_OK) {
        /* the batch's argument buffer is full: start the next batch */
        RT_TRY(vk_drain(vd));
        RT_TRY(vk_batch_get(vd, &b));
        RT_TRY(vk_args_alloc(vd, b, bytes, &off));
    }
    memcpy((char *)b->args->map + off, words, bytes);
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = b->pool, .descriptorSetCount = 1,
                                      .pSetLayouts = &vd->set_layout[rk->n_bindings]};
    VkDescriptorSet set;
    VkResult r = vd->api.vkAllocateDescriptorSets(vd->dev, &ai, &set);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_EXECUTION, "vkAllocateDescriptorSets for %s", k->name);
    VkDescriptorBufferInfo bi[VK_MAX_BINDINGS];
    VkWriteDescriptorSet w[VK_MAX_BINDINGS];
    bi[0] = (VkDescriptorBufferInfo){b->args->buf, off, bytes};
    for (int i = 0; i < k->n_inputs; i++)
        bi[1 + i] = (VkDescriptorBufferInfo){vk_buf(ins[i])->buf, 0, VK_WHOLE_SIZE};
    for (int o = 0; o < k->n_outputs; o++)
        bi[1 + k->n_inputs + o] = (VkDescriptorBufferInfo){vk_buf(outs[o])->buf, 0, VK_WHOLE_SIZE};
    if (rk->n_bindings > 1 + k->n_inputs + k->n_outputs)
        bi[1 + k->n_inputs + k->n_outputs] = (VkDescriptorBufferInfo){vk_buf(vd->scratch)->buf, 0, VK_WHOLE_SIZE};
    for (int i = 0; i < rk->n_bindings; i++)
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                      .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i]};
    vd->api.vkUpdateDescriptorSets(vd->dev, (uint32_t)rk->n_bindings, w, 0, NULL);
    vd->api.vkCmdBindPipeline(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, rk->pipeline);
    vd->api.vkCmdBindDescriptorSets(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vd->pipe_layout[rk->n_bindings], 0, 1, &set,
                                    0, NULL);
    vd->api.vkCmdDispatch(b->cmd, grid[0], grid[1], 1);
    return vk_batch_task_done(vd);
}

/* Few long rows of a one-stage reduction: leaves, tree passes, finish (glsl.h). The barrier
 * after each dispatch orders the passes; the records alternate between two regions. */
static burnc_status_t launch_passes(rt_device *dev, rt_kernel *rk, int64_t *w, int64_t rows, int64_t leaves,
                                    rt_buffer *const *ins, rt_buffer *const *outs)
{
    const kir_kernel *k = &rk->ir;
    int64_t *pw = w + cg_glsl_pass_word(k), wg = rk->opt.wg_size, warps = wg / 32;
    int64_t region[2] = {0, rows * leaves};
    RT_TRY(scratch_reserve(dev, (size_t)(rows * leaves + rows * ((leaves + 31) / 32)) * VK_RECORD_BYTES));
    vk_dev(dev)->pass_launches++;
    uint32_t grid[2];
    pw[0] = CG_GLSL_PASS_LEAVES, pw[1] = leaves, pw[2] = 0, pw[3] = region[0];
    grid_of((rows * leaves + warps - 1) / warps, grid);
    RT_TRY(dispatch(dev, rk, w, grid, ins, outs));
    int at = 0;
    for (int64_t m = leaves; m > 1; m = (m + 31) / 32, at ^= 1) {
        pw[0] = CG_GLSL_PASS_TREE, pw[1] = m, pw[2] = region[at], pw[3] = region[at ^ 1];
        grid_of((rows * ((m + 31) / 32) + wg - 1) / wg, grid);
        RT_TRY(dispatch(dev, rk, w, grid, ins, outs));
    }
    pw[0] = CG_GLSL_PASS_FINISH, pw[1] = 0, pw[2] = region[at], pw[3] = 0;
    grid_of((rows + wg - 1) / wg, grid);
    return dispatch(dev, rk, w, grid, ins, outs);
}

static burnc_status_t launch_with_locked(rt_device *dev, rt_kernel *rk, const kir_args *args, rt_buffer *const *ins,
                                         rt_buffer *const *outs)
{
    const kir_kernel *k = &rk->ir;
    uint32_t grid[2];
    cg_glsl_grid(k, &rk->opt, args->extents, grid);
    if (!grid[0])
        return BURNC_OK;
    int64_t w[512];
    if (cg_glsl_arg_words(k) > sizeof w / sizeof *w)
        return rt_fail(BURNC_ERR_EXECUTION, "vulkan: %s has %zu argument words, more than %zu", k->name,
                       cg_glsl_arg_words(k), sizeof w / sizeof *w);
    cg_glsl_pack_args(k, args, w);
    if (cg_glsl_wide(w) && !rk->opt.wide) {
        cg_glsl_options o = rk->opt;
        o.wide = true;
        RT_TRY(vk_kernel_variant(dev, rk, o, &rk));
    }
    if (cg_glsl_multipass(k)) {
        int64_t rows = w[0], leaves = (w[1] + KIR_LEAF - 1) / KIR_LEAF;
        if (rows < VK_PASSES_ROWS && leaves >= VK_PASSES_LEAVES) {
            cg_glsl_options o = rk->opt;
            o.passes = true;
            rt_kernel *pv;
            RT_TRY(vk_kernel_variant(dev, rk, o, &pv));
            return launch_passes(dev, pv, w, rows, leaves, ins, outs);
        }
    }
    return dispatch(dev, rk, w, grid, ins, outs);
}

burnc_status_t vk_launch_with(rt_device *dev, rt_kernel *rk, const kir_args *args, rt_buffer *const *ins,
                              rt_buffer *const *outs)
{
    vk_device *vd = vk_dev(dev);
    mtx_lock(&vd->qlock);
    burnc_status_t s = launch_with_locked(dev, rk, args, ins, outs);
    mtx_unlock(&vd->qlock);
    return s;
}

/* ---- Opaque records: on the host ---- */

burnc_status_t vk_compile(rt_device *dev, const ir_group *g, rt_kernel **out)
{
    if (g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "vulkan: a record kernel runs one record, not %d", g->n);
    rt_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "vulkan: out of memory for a kernel");
    k->record = true;
    const ir_record *r = g->recs[0];
    burnc_dtype_t dt = r->compute;
    k->matmul = r->op == IR_OP_MATMUL && r->dtype == dt &&
                (dt == BURNC_DTYPE_F32 || (dt == BURNC_DTYPE_F64 && vk_dev(dev)->f64) ||
                 ((dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) && vk_dev(dev)->storage16));
    *out = k;
    return BURNC_OK;
}

/* ---- Matmul on the device ---- */

static burnc_status_t matmul_pipeline(rt_device *dev, rt_kernel *k, burnc_dtype_t dt, int rank)
{
    vk_device *vd = vk_dev(dev);
    burnc_status_t s = BURNC_OK;
    mtx_lock(&vd->lock);
    if (!k->mm[rank]) {
        cg_glsl_options opt = base_options(vd);
        char *glsl = cg_glsl_matmul(dt, rank, &opt), name[32];
        snprintf(name, sizeof name, "matmul_%s_r%d", ir_dtype_name(dt), rank);
        uint32_t *words = NULL;
        size_t n = 0;
        s = glsl ? spirv_for(vd, name, glsl, &words, &n) : burnc_error_code();
        if (s == BURNC_OK)
            s = make_pipeline(vd, 4, words, n, name, &k->mm[rank]);
        free(words);
        free(glsl);
    }
    mtx_unlock(&vd->lock);
    return s;
}

/* The fma chain of include/burnc.h per element, tiled (codegen/glsl.c); false when the grid
 * does not fit (the host runs it then). */
static burnc_status_t matmul_launch(rt_device *dev, rt_kernel *k, const ir_record *rec, rt_buffer *const *bufs,
                                    bool *done)
{
    vk_device *vd = vk_dev(dev);
    int r = rec->out_rank;
    const ir_view *va = &rec->in[0].view, *vb = &rec->in[1].view;
    int64_t words[64];
    if (r < 2 || r > BURNC_MAX_RANK || cg_glsl_matmul_words() > 64)
        return BURNC_OK;
    cg_glsl_matmul_pack(r, rec->out_shape, va->shape[r - 1], va->offset, va->strides, vb->offset, vb->strides, words);
    int64_t gx = (words[1] + 15) / 16, gy = (words[0] + 15) / 16, nb = words[3];
    if (gx > 65535 || gy > 65535)
        return BURNC_OK;
    *done = true;
    if (!gx || !gy || !nb)
        return BURNC_OK;
    RT_TRY(matmul_pipeline(dev, k, rec->compute, r));
    size_t bytes = cg_glsl_matmul_words() * sizeof(int64_t);
    vk_batch *b;
    VkDeviceSize off;
    RT_TRY(vk_batch_get(vd, &b));
    if (vk_args_alloc(vd, b, bytes, &off) != BURNC_OK) {
        RT_TRY(vk_drain(vd));
        RT_TRY(vk_batch_get(vd, &b));
        RT_TRY(vk_args_alloc(vd, b, bytes, &off));
    }
    memcpy((char *)b->args->map + off, words, bytes);
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = b->pool, .descriptorSetCount = 1,
                                      .pSetLayouts = &vd->set_layout[4]};
    VkDescriptorSet set;
    VkResult res = vd->api.vkAllocateDescriptorSets(vd->dev, &ai, &set);
    if (res != VK_SUCCESS)
        return vk_fail(res, BURNC_ERR_EXECUTION, "vkAllocateDescriptorSets for matmul");
    VkDescriptorBufferInfo bi[4] = {{b->args->buf, off, bytes},
                                    {vk_buf(bufs[0])->buf, 0, VK_WHOLE_SIZE},
                                    {vk_buf(bufs[1])->buf, 0, VK_WHOLE_SIZE},
                                    {vk_buf(bufs[2])->buf, 0, VK_WHOLE_SIZE}};
    VkWriteDescriptorSet w[4];
    for (int i = 0; i < 4; i++)
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                      .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i]};
    vd->api.vkUpdateDescriptorSets(vd->dev, 4, w, 0, NULL);
    vd->api.vkCmdBindPipeline(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->mm[r]);
    vd->api.vkCmdBindDescriptorSets(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vd->pipe_layout[4], 0, 1, &set, 0, NULL);
    vd->api.vkCmdDispatch(b->cmd, (uint32_t)gx, (uint32_t)gy, (uint32_t)(nb < 65535 ? nb : 65535));
    return vk_batch_task_done(vd);
}

/* Runs the record with the reference kernels on host views of its buffers: the mapped memory
 * itself where the device's memory is the host's, else copies. */
static burnc_status_t launch_locked(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs)
{
    if (!k->record || g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "vulkan: launch of a group this kernel was not compiled for");
    vk_device *vd = vk_dev(dev);
    const ir_record *rec = g->recs[0];
    if (k->matmul) {
        bool done = false;
        RT_TRY(matmul_launch(dev, k, rec, bufs[0], &done));
        if (done)
            return BURNC_OK;
    }
    int n = rec->n_in + 1;
    rt_buffer *views = calloc((size_t)n, sizeof *views);
    rt_buffer **ptrs = calloc((size_t)n, sizeof *ptrs);
    burnc_status_t s = views && ptrs ? vk_drain(vd)
                                     : rt_fail(BURNC_ERR_OUT_OF_MEMORY, "vulkan: %s: out of memory", ir_op_name(rec->op));
    int made = 0;
    for (; made < n && s == BURNC_OK; made++) {
        vk_buffer *b = vk_buf(bufs[0][made]);
        views[made] = b->base;
        views[made].host = b->map;
        if (!b->map) {
            views[made].host = malloc(b->base.size ? b->base.size : 1);
            if (!views[made].host)
                s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "vulkan: %s: no host memory for %zu bytes", ir_op_name(rec->op),
                            b->base.size);
            else if (made < rec->n_in)
                s = dev->be->read(dev, &b->base, 0, views[made].host, b->base.size);
        }
        ptrs[made] = &views[made];
    }
    if (s == BURNC_OK)
        s = rt_ref_run_record(rec, ptrs);
    vk_buffer *out = vk_buf(bufs[0][rec->n_in]);
    if (s == BURNC_OK && !out->map)
        s = dev->be->write(dev, &out->base, 0, views[rec->n_in].host, out->base.size);
    for (int i = 0; i < made; i++)
        if (!vk_buf(bufs[0][i])->map)
            free(views[i].host);
    free(views);
    free(ptrs);
    return s;
}

burnc_status_t vk_launch(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs)
{
    vk_device *vd = vk_dev(dev);
    mtx_lock(&vd->qlock);
    burnc_status_t s = launch_locked(dev, k, g, bufs);
    mtx_unlock(&vd->qlock);
    return s;
}

void vk_kernel_free(rt_device *dev, rt_kernel *k)
{
    /* record kernels only: compiled ones belong to the device's list */
    if (!k || !k->record)
        return;
    vk_device *vd = vk_dev(dev);
    for (int r = 0; r <= BURNC_MAX_RANK; r++)
        if (k->mm[r])
            vd->api.vkDestroyPipeline(vd->dev, k->mm[r], NULL);
    free(k);
}
