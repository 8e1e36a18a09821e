/* The cuda device: device memory from the driver, kernels of the kernel IR lowered to PTX,
 * one stream per device (cu.h says how the stream orders everything). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc_config.h"
#include "cu.h"
#include "gemm.h"
#include "mma.h"

/* Pinned staging for host transfers: larger transfers go through it in pieces. */
enum { STAGING_BYTES = 8 << 20 };

/* ---- Errors and the context ---- */

static burnc_status_t lost_error(rt_device *dev, const char *what)
{
    return rt_fail(BURNC_ERR_DEVICE_LOST, "%s: %s: the device was lost earlier (%s): release and reopen it (the "
                   "driver may refuse the GPU to this process for good)", what, dev->spec, cuda_dev(dev)->lost_msg);
}

burnc_status_t cuda_check(rt_device *dev, CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return BURNC_OK;
    cuda_device *cd = cuda_dev(dev);
    burnc_status_t s = cuda_fail(r, "%s: %s", what, dev->spec);
    if (cuda_error_is_sticky(r) && !atomic_exchange(&cd->lost, true)) {
        char text[180];
        snprintf(cd->lost_msg, sizeof cd->lost_msg, "%s", cuda_error_text(r, text, sizeof text));
        rt_log("runtime", "%s: sticky error %s: the device is lost until it is reopened", dev->spec, cd->lost_msg);
    }
    return s;
}

burnc_status_t cuda_enter(rt_device *dev, const char *what)
{
    cuda_device *cd = cuda_dev(dev);
    if (atomic_load(&cd->lost))
        return lost_error(dev, what);
    /* the primary context is current per thread; any thread may call into the device */
    return cuda_check(dev, cd->cu->CtxSetCurrent(cd->ctx), what);
}

burnc_status_t cuda_wait_locked(rt_device *dev, const char *what)
{
    cuda_device *cd = cuda_dev(dev);
    RT_TRY(cuda_batch_submit_locked(dev));
    return cuda_check(dev, cd->cu->StreamSynchronize(cd->stream), what); /* one driver call, not an event's two */
}

/* ---- Enumerating and opening ---- */

static void gpu_title(const cuda_driver *cu, CUdevice d, char *out, size_t cap)
{
    char name[100] = "NVIDIA GPU";
    int major = 0, minor = 0;
    size_t mem = 0;
    cu->DeviceGetName(name, sizeof name, d);
    cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    cu->DeviceTotalMem(&mem, d);
    snprintf(out, cap, "%s (sm_%d%d, %.1f GiB)", name, major, minor, (double)mem / (1 << 30));
}

static int cuda_enumerate(burnc_device_info_t *out, int cap)
{
    char why[400];
    const cuda_driver *cu = cuda_driver_get(why, sizeof why);
    int n = 0;
    if (!cu || cu->DeviceGetCount(&n) != CUDA_SUCCESS)
        return 0;
    for (int i = 0; i < n && i < cap && out; i++) {
        CUdevice d;
        out[i] = (burnc_device_info_t){.type = BURNC_DEVICE_CUDA};
        snprintf(out[i].spec, sizeof out[i].spec, "cuda:%d", i);
        if (cu->DeviceGet(&d, i) == CUDA_SUCCESS)
            gpu_title(cu, d, out[i].name, sizeof out[i].name);
    }
    return n;
}

static void cuda_close(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    if (!cd)
        return;
    bool lost = atomic_load(&cd->lost);
    if (!lost && cd->cu->CtxSetCurrent(cd->ctx) == CUDA_SUCCESS && cd->stream) {
        cuda_gemm_flush(dev);
        mtx_lock(&cd->lock);
        cuda_batch_submit_locked(dev);
        cd->cu->StreamSynchronize(cd->stream);
        mtx_unlock(&cd->lock);
    }
    cuda_profile_report(dev);
    cuda_graphs_free(dev);
    cuda_mma_free(dev);
    cuda_gemm_free(dev);
    cuda_kernel_cache_free(dev);
    if (cd->staging)
        cd->cu->MemFreeHost(cd->staging);
    for (int i = 0; i < 2; i++)
        if (cd->timer[i])
            cd->cu->EventDestroy(cd->timer[i]);
    if (cd->stream)
        cd->cu->StreamDestroy(cd->stream);
    if (cd->ctx) {
        /* a lost context is unusable for anyone: reset it so that reopening gets a fresh one */
        if (lost)
            cd->cu->DevicePrimaryCtxReset(cd->device);
        cd->cu->DevicePrimaryCtxRelease(cd->device);
    }
    free(cd->plan);
    mtx_destroy(&cd->plan_lock);
    mtx_destroy(&cd->lock);
    free(cd);
    dev->impl = NULL;
}

static burnc_status_t cuda_open(rt_device *dev, int index)
{
    char why[400];
    const cuda_driver *cu = cuda_driver_get(why, sizeof why);
    if (!cu)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s", dev->spec, why);
    int count = 0;
    CUresult r = cu->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return cuda_fail(r, "burnc_device_open: %s: cuDeviceGetCount", dev->spec);
    if (index >= count)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: the driver sees %d CUDA device%s", dev->spec,
                       count, count == 1 ? "" : "s");
    cuda_device *cd = calloc(1, sizeof *cd);
    if (!cd)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: %s: out of memory", dev->spec);
    cd->cu = cu;
    mtx_init(&cd->lock, mtx_plain);
    mtx_init(&cd->plan_lock, mtx_plain);
    atomic_init(&cd->lost, false);
    atomic_init(&cd->fuse, rt_fusion_default());
    const char *tf = getenv("BURNC_MATMUL_TF32");
    atomic_init(&cd->tf32, tf && strcmp(tf, "1") == 0);
    const char *g = getenv("BURNC_CUDA_GRAPHS");
    cd->graphs = g && (strcmp(g, "1") == 0 || strcmp(g, "on") == 0);
    dev->impl = cd;
    cuda_kernel_cache_init(dev);
    int major = 0, minor = 0;
    const char *step = "cuDeviceGet";
    r = cu->DeviceGet(&cd->device, index);
    if (r == CUDA_SUCCESS)
        step = "cuDeviceGetAttribute", r = cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                                  cd->device);
    if (r == CUDA_SUCCESS)
        r = cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cd->device);
    if (r == CUDA_SUCCESS)
        r = cu->DeviceGetAttribute(&cd->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cd->device);
    if (r == CUDA_SUCCESS)
        r = cu->DeviceGetAttribute(&cd->max_shared_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                   cd->device);
    if (r == CUDA_SUCCESS)
        step = "cuDeviceTotalMem", r = cu->DeviceTotalMem(&cd->total_mem, cd->device);
    if (r == CUDA_SUCCESS)
        step = "cuDriverGetVersion", r = cu->DriverGetVersion(&cd->driver_version);
    if (r == CUDA_SUCCESS)
        step = "cuDeviceGetName", r = cu->DeviceGetName(cd->gpu_name, sizeof cd->gpu_name, cd->device);
    if (r == CUDA_SUCCESS)
        step = "cuDevicePrimaryCtxRetain", r = cu->DevicePrimaryCtxRetain(&cd->ctx, cd->device);
    if (r == CUDA_SUCCESS)
        step = "cuCtxSetCurrent", r = cu->CtxSetCurrent(cd->ctx);
    if (r == CUDA_SUCCESS)
        step = "cuStreamCreate", r = cu->StreamCreate(&cd->stream, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS)
        step = "cuMemHostAlloc", r = cu->MemHostAlloc(&cd->staging, STAGING_BYTES, CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_SUCCESS && !(cd->plan = malloc(sizeof *cd->plan)))
        step = "malloc of a launch plan", r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && cuda_gemm_init(dev) != BURNC_OK)
        step = "the matmul's state", r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        burnc_status_t s = cuda_fail(r, "burnc_device_open: %s: %s", dev->spec, step);
        if (s == BURNC_ERR_EXECUTION) {
            char why[512];
            snprintf(why, sizeof why, "%s", burnc_error_message());
            s = rt_fail(BURNC_ERR_UNAVAILABLE, "%s", why);
        }
        cuda_close(dev);
        return s;
    }
    cd->staging_size = STAGING_BYTES;
    cd->cc = major * 10 + minor;
    const char *pdl = getenv("BURNC_CUDA_PDL");
    cd->pdl = cd->cc >= 90 && !(pdl && (strcmp(pdl, "0") == 0 || strcmp(pdl, "off") == 0));
    cuda_profile_init(dev);
    if (cd->profile)
        cd->graphs = false; /* a profile waits after every launch, which a capture cannot */
    gpu_title(cu, cd->device, dev->name, sizeof dev->name);
    rt_log("runtime", "%s: %s, %d SMs, driver %d, fusion %s, graphs %s, overlapped launches %s", dev->spec, dev->name,
           cd->sms, cd->driver_version, atomic_load(&cd->fuse) ? "on" : "off", cd->graphs ? "on" : "off",
           cd->pdl ? "on" : "off");
    return BURNC_OK;
}

static bool cuda_supports_dtype(rt_device *dev, burnc_dtype_t dt)
{
    (void)dev;
    return ir_dtype_valid(dt);
}

/* ---- Buffers ---- */

static burnc_status_t cuda_alloc(rt_device *dev, size_t size, rt_buffer **out)
{
    RT_TRY(cuda_enter(dev, "cuda alloc"));
    cuda_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of host memory for a buffer", dev->spec);
    /* empty tensors still get an address */
    CUresult r = cuda_dev(dev)->cu->MemAlloc(&b->ptr, size ? size : 256);
    if (r != CUDA_SUCCESS) {
        free(b);
        char text[180];
        return rt_fail(cuda_status_of(r), "%s: cannot allocate %zu bytes of device memory: %s", dev->spec, size,
                       cuda_error_text(r, text, sizeof text));
    }
    b->base.size = size;
    *out = &b->base;
    return BURNC_OK;
}

/* The pool frees only what no recorded work will use again, but launches still queued on the
 * stream may: wait for them first (cuMemFree would not). */
static void cuda_free(rt_device *dev, rt_buffer *buf)
{
    if (!buf)
        return;
    cuda_device *cd = cuda_dev(dev);
    if (cuda_enter(dev, "cuda free") == BURNC_OK) {
        cuda_gemm_flush(dev); /* a held matmul may read it */
        mtx_lock(&cd->lock);
        cuda_wait_locked(dev, "cuda free");
        mtx_unlock(&cd->lock);
        cd->cu->MemFree(((cuda_buffer *)buf)->ptr);
    }
    free(buf);
}

/* Host writes go through the pinned staging buffer, in stream order: the buffer may be fresh
 * from the pool while launches that used it before are still queued. */
static burnc_status_t cuda_write(rt_device *dev, rt_buffer *buf, size_t offset, const void *src, size_t n)
{
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "write"));
    RT_TRY(cuda_enter(dev, "burnc write"));
    RT_TRY(cuda_gemm_flush(dev));
    cuda_device *cd = cuda_dev(dev);
    mtx_lock(&cd->lock);
    burnc_status_t s = cuda_batch_submit_locked(dev); /* launches recorded before go first */
    for (size_t done = 0; done < n && s == BURNC_OK; done += cd->staging_size) {
        size_t part = n - done < cd->staging_size ? n - done : cd->staging_size;
        if (done > 0 && (s = cuda_wait_locked(dev, "burnc write")) != BURNC_OK) /* staging is free again */
            break;
        memcpy(cd->staging, (const char *)src + done, part);
        s = cuda_check(dev, cd->cu->MemcpyHtoDAsync(cuda_ptr(buf) + offset + done, cd->staging, part, cd->stream),
                       "cuMemcpyHtoDAsync");
    }
    if (s == BURNC_OK)
        s = cuda_wait_locked(dev, "burnc write");
    mtx_unlock(&cd->lock);
    return s;
}

static burnc_status_t cuda_read(rt_device *dev, rt_buffer *buf, size_t offset, void *dst, size_t n)
{
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "read"));
    RT_TRY(cuda_enter(dev, "burnc read"));
    RT_TRY(cuda_gemm_flush(dev));
    cuda_device *cd = cuda_dev(dev);
    burnc_status_t s = BURNC_OK;
    mtx_lock(&cd->lock);
    s = cuda_batch_submit_locked(dev);
    for (size_t done = 0; done < n && s == BURNC_OK; done += cd->staging_size) {
        size_t part = n - done < cd->staging_size ? n - done : cd->staging_size;
        s = cuda_check(dev, cd->cu->MemcpyDtoHAsync(cd->staging, cuda_ptr(buf) + offset + done, part, cd->stream),
                       "cuMemcpyDtoHAsync");
        if (s == BURNC_OK)
            s = cuda_wait_locked(dev, "burnc read");
        if (s == BURNC_OK)
            memcpy((char *)dst + done, cd->staging, part);
    }
    mtx_unlock(&cd->lock);
    return s;
}

/* ---- Opaque groups (matmul, cat, pad, index ops) ----
 * Float matmuls run on the GPU (gemm.c). Integer matmuls and device-side index ops are later
 * work: for now these records run on the host with the reference kernels. The stream is
 * drained, the inputs copied to host memory through the staging buffer, the record run, and
 * its output copied back: correct, and slow for large tensors. */

static burnc_status_t cuda_compile(rt_device *dev, const ir_group *g, rt_kernel **out)
{
    (void)dev;
    if (g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "cuda: a record kernel runs one record, not %d", g->n);
    rt_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cuda: out of memory for a kernel");
    k->kind = CUDA_KERNEL_RECORD;
    *out = k;
    return BURNC_OK;
}

static burnc_status_t cuda_launch(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs)
{
    if (k->kind != CUDA_KERNEL_RECORD || g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "cuda: launch of a group this kernel was not compiled for");
    const ir_record *rec = g->recs[0];
    if (cuda_gemm_handles(rec))
        return cuda_gemm_launch(dev, rec, bufs[0]);
    RT_TRY(cuda_gemm_flush(dev));
    int n = rec->n_in + 1;
    rt_buffer *host = calloc((size_t)n, sizeof *host), **hp = calloc((size_t)n, sizeof *hp);
    burnc_status_t s = host && hp ? BURNC_OK
                                  : rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: cuda: out of host memory",
                                            ir_op_name(rec->op));
    for (int i = 0; i < n && s == BURNC_OK; i++) {
        hp[i] = &host[i];
        host[i].size = bufs[0][i]->size;
        host[i].host = malloc(host[i].size ? host[i].size : 1);
        if (!host[i].host)
            s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: cuda: no host memory (%zu bytes) to run it on the host",
                        ir_op_name(rec->op), host[i].size);
        else if (i < rec->n_in)
            s = cuda_read(dev, bufs[0][i], 0, host[i].host, host[i].size);
    }
    if (s == BURNC_OK)
        s = rt_ref_run_record(rec, hp);
    if (s == BURNC_OK)
        s = cuda_write(dev, bufs[0][rec->n_in], 0, host[rec->n_in].host, host[rec->n_in].size);
    for (int i = 0; host && i < n; i++)
        free(host[i].host);
    free(host);
    free(hp);
    return s;
}

static void cuda_kernel_free(rt_device *dev, rt_kernel *k)
{
    (void)dev;
    free(k); /* record kernels only: compiled ones belong to the device's kernel cache */
}

/* ---- Fused kernels ---- */

static burnc_status_t cuda_compile_kernel(rt_device *dev, const kir_kernel *k, uint64_t key, rt_kernel **out)
{
    /* the heuristic's options: the launch asks autotune and may use another variant */
    cg_ptx_options opt = {.sm = cuda_dev(dev)->cc};
    return cuda_kernel_get(dev, k, key, &opt, out);
}

static burnc_status_t cuda_launch_kernel(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                                         rt_buffer *const *outs, bool epilogue)
{
    if (k->kind != CUDA_KERNEL_COMPILED)
        return rt_fail(BURNC_ERR_INTERNAL, "cuda: launch_kernel of a record kernel");
    RT_TRY(cuda_enter(dev, k->ir.name));
    bool fused = false; /* into the stores of the matmul before it */
    RT_TRY(cuda_gemm_kernel_launched(dev, &k->ir, args, ins, outs, epilogue, &fused));
    if (fused)
        return BURNC_OK;
    cg_ptx_options opt;
    RT_TRY(cuda_tune_choose(dev, &k->ir, k->node.key, args, true, &opt, NULL));
    if (memcmp(&opt, &k->opt, sizeof opt) != 0)
        RT_TRY(cuda_kernel_get(dev, &k->ir, k->node.key, &opt, &k));
    return cuda_kernel_run(dev, k, args, ins, outs);
}

static burnc_status_t cuda_sync(rt_device *dev)
{
    RT_TRY(cuda_enter(dev, "burnc_device_sync"));
    cuda_gemm_flush(dev); /* a failure is the device's pending error, which sync reports */
    cuda_device *cd = cuda_dev(dev);
    mtx_lock(&cd->lock);
    burnc_status_t s = cuda_wait_locked(dev, "burnc_device_sync");
    mtx_unlock(&cd->lock);
    return s;
}

/* Compiled code is valid for a compute capability; cubins also for the driver's compiler. */
static void cuda_fingerprint(rt_device *dev, char *out, size_t cap)
{
    cuda_device *cd = cuda_dev(dev);
    if (cap)
        snprintf(out, cap, "cuda/sm_%d/driver %d/%s", cd->cc, cd->driver_version, BURNC_VERSION);
}

static void cuda_set_matmul_tf32(rt_device *dev, bool allow) { atomic_store(&cuda_dev(dev)->tf32, allow); }
static bool cuda_fusion_enabled(rt_device *dev) { return atomic_load(&cuda_dev(dev)->fuse); }
static void cuda_set_fusion(rt_device *dev, bool enabled) { atomic_store(&cuda_dev(dev)->fuse, enabled); }
static const char *cuda_autotune_fingerprint(rt_device *dev) { return cuda_tune_fingerprint(dev); }

/* Tuning runs on pool buffers a held matmul may still read. */
static burnc_status_t cuda_tune_kernel_hook(rt_device *dev, const kir_kernel *k, const kir_args *args,
                                            struct at_outcome *out)
{
    RT_TRY(cuda_gemm_flush(dev));
    return cuda_tune_kernel(dev, k, args, out);
}

/* ---- The copy yardstick ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

burnc_status_t cuda_timer_first_launch(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    if (!cd->timer_armed)
        return BURNC_OK;
    cd->timer_armed = false;
    return cuda_check(dev, cd->cu->EventRecord(cd->timer[0], cd->stream), "cuEventRecord");
}

/* The start arms its event for the first launch after it (the work launched before it stays
 * out); the stop records its own after the launches so far and waits for it. */
static burnc_status_t cuda_timer_mark(rt_device *dev, bool stop, double *seconds)
{
    RT_TRY(cuda_enter(dev, "burnc_device_timer"));
    cuda_gemm_flush(dev); /* a failure is the device's pending error, which a stop reports */
    cuda_device *cd = cuda_dev(dev);
    const cuda_driver *cu = cd->cu;
    float ms = 0;
    mtx_lock(&cd->lock);
    burnc_status_t s = cuda_batch_submit_locked(dev);
    for (int i = 0; i < 2 && s == BURNC_OK; i++)
        if (!cd->timer[i])
            s = cuda_check(dev, cu->EventCreate(&cd->timer[i], CU_EVENT_DEFAULT), "cuEventCreate");
    if (s == BURNC_OK && !stop)
        cd->timer_armed = true;
    if (s == BURNC_OK && stop) /* still armed: nothing was launched, the interval is empty */
        s = cuda_timer_first_launch(dev);
    if (s == BURNC_OK && stop)
        s = cuda_check(dev, cu->EventRecord(cd->timer[1], cd->stream), "cuEventRecord");
    if (s == BURNC_OK && stop)
        s = cuda_check(dev, cu->EventSynchronize(cd->timer[1]), "cuEventSynchronize");
    if (s == BURNC_OK && stop)
        s = cuda_check(dev, cu->EventElapsedTime(&ms, cd->timer[0], cd->timer[1]), "cuEventElapsedTime");
    mtx_unlock(&cd->lock);
    if (stop)
        *seconds = ms * 1e-3;
    return s;
}

static burnc_status_t cuda_copy_time(rt_device *dev, size_t bytes, int reps, double *seconds)
{
    RT_TRY(cuda_enter(dev, "burnc_device_copy_time"));
    RT_TRY(cuda_gemm_flush(dev));
    cuda_device *cd = cuda_dev(dev);
    const cuda_driver *cu = cd->cu;
    rt_buffer *src = NULL, *dst = NULL;
    CUevent ev[2] = {NULL, NULL};
    double *ms = malloc((size_t)reps * sizeof *ms);
    burnc_status_t s = ms ? BURNC_OK : rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_copy_time: out of memory");
    if (s == BURNC_OK)
        s = rt_pool_alloc(dev, bytes, &src);
    if (s == BURNC_OK)
        s = rt_pool_alloc(dev, bytes, &dst);
    if (s == BURNC_OK)
        s = cuda_check(dev, cu->EventCreate(&ev[0], CU_EVENT_DEFAULT), "cuEventCreate");
    if (s == BURNC_OK)
        s = cuda_check(dev, cu->EventCreate(&ev[1], CU_EVENT_DEFAULT), "cuEventCreate");
    mtx_lock(&cd->lock);
    if (s == BURNC_OK)
        s = cuda_batch_submit_locked(dev);
    if (s == BURNC_OK) /* defined contents, and a warm-up */
        s = cuda_check(dev, cu->MemsetD8Async(cuda_ptr(src), 0x3c, bytes, cd->stream), "cuMemsetD8Async");
    if (s == BURNC_OK)
        s = cuda_check(dev, cu->MemcpyDtoDAsync(cuda_ptr(dst), cuda_ptr(src), bytes, cd->stream), "cuMemcpyDtoDAsync");
    for (int i = 0; i < reps && s == BURNC_OK; i++) {
        float t = 0;
        s = cuda_check(dev, cu->EventRecord(ev[0], cd->stream), "cuEventRecord");
        if (s == BURNC_OK)
            s = cuda_check(dev, cu->MemcpyDtoDAsync(cuda_ptr(dst), cuda_ptr(src), bytes, cd->stream),
                           "cuMemcpyDtoDAsync");
        if (s == BURNC_OK)
            s = cuda_check(dev, cu->EventRecord(ev[1], cd->stream), "cuEventRecord");
        if (s == BURNC_OK)
            s = cuda_check(dev, cu->EventSynchronize(ev[1]), "cuEventSynchronize");
        if (s == BURNC_OK)
            s = cuda_check(dev, cu->EventElapsedTime(&t, ev[0], ev[1]), "cuEventElapsedTime");
        if (s == BURNC_OK)
            ms[i] = t;
    }
    mtx_unlock(&cd->lock);
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cu->EventDestroy(ev[i]);
    if (src)
        rt_pool_free(dev, src);
    if (dst)
        rt_pool_free(dev, dst);
    if (s == BURNC_OK) {
        qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
        *seconds = ms[reps / 2] * 1e-3;
    }
    free(ms);
    return s;
}

const rt_backend rt_cuda_backend = {
    .kind = "cuda",
    .type = BURNC_DEVICE_CUDA,
    .queued = true,
    .enumerate = cuda_enumerate,
    .open = cuda_open,
    .close = cuda_close,
    .supports_dtype = cuda_supports_dtype,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .write = cuda_write,
    .read = cuda_read,
    .compile = cuda_compile,
    .launch = cuda_launch,
    .kernel_free = cuda_kernel_free,
    .sync = cuda_sync,
    .fingerprint = cuda_fingerprint,
    .compile_kernel = cuda_compile_kernel,
    .launch_kernel = cuda_launch_kernel,
    .fusion_enabled = cuda_fusion_enabled,
    .set_fusion = cuda_set_fusion,
    .set_matmul_tf32 = cuda_set_matmul_tf32,
    .autotune_fingerprint = cuda_autotune_fingerprint,
    .tune_kernel = cuda_tune_kernel_hook,
    .copy_time = cuda_copy_time,
    .timer_mark = cuda_timer_mark,
};
