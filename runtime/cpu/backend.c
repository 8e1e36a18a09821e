/* The cpu device: host memory, kernels compiled by LLVM (loaded only when something must be
 * compiled), opaque records run by the reference kernels, all executed in order by one worker
 * thread that splits each kernel across a thread pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "burnc_config.h"
#include "cpu.h"

/* Cache-line and widest-vector alignment of every buffer. */
enum { CPU_ALIGN = 64 };

/* ---- Naming the host ---- */

/* The value of the first "key : value" line of /proc/cpuinfo, or "" */
static void cpuinfo_field(const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[4096];
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || !strchr(line, ':'))
            continue;
        const char *v = strchr(line, ':') + 1;
        v += strspn(v, " \t");
        snprintf(out, cap, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

static int core_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void host_name(char *out, size_t cap)
{
    char model[256];
    cpuinfo_field("model name", model, sizeof model);
    int cores = core_count();
    snprintf(out, cap, "%.100s (%d core%s)", model[0] ? model : "host CPU", cores, cores == 1 ? "" : "s");
}

static int cpu_enumerate(burnc_device_info_t *out, int cap)
{
    if (!rt_llvm_module_available())
        return 0;
    if (out && cap >= 1) {
        out[0] = (burnc_device_info_t){.type = BURNC_DEVICE_CPU};
        snprintf(out[0].spec, sizeof out[0].spec, "cpu");
        host_name(out[0].name, sizeof out[0].name);
    }
    return 1;
}

/* ---- Opening ---- */

static void cpu_close(rt_device *dev)
{
    cpu_device *cd = cpu_dev(dev);
    if (!cd)
        return;
    cpu_queue_free(cd->queue); /* runs what is queued first */
    cpu_kernel_cache_free(&cd->kernels);
    cpu_threads_free(cd->threads);
    free(cd);
    dev->impl = NULL;
}

static burnc_status_t cpu_open(rt_device *dev, int index)
{
    if (index != 0)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: the host is one cpu device (\"cpu\")",
                       dev->spec);
    char why[512];
    if (!rt_llvm_module_find(why, sizeof why))
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s", dev->spec, why);
    cpu_device *cd = calloc(1, sizeof *cd);
    if (!cd)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: %s: out of memory", dev->spec);
    dev->impl = cd;
    atomic_init(&cd->fuse, rt_fusion_default());
    cpu_kernel_cache_init(&cd->kernels);
    burnc_status_t s = cpu_threads_new(cpu_thread_count_default(), &cd->threads);
    if (s == BURNC_OK)
        s = cpu_queue_new(cd->threads, &cd->queue);
    if (s != BURNC_OK) {
        cpu_close(dev);
        return s;
    }
    host_name(dev->name, sizeof dev->name);
    rt_log("runtime", "%s: %s, %d threads, fusion %s", dev->spec, dev->name, cpu_threads_count(cd->threads),
           atomic_load(&cd->fuse) ? "on" : "off");
    return BURNC_OK;
}

static bool cpu_supports_dtype(rt_device *dev, burnc_dtype_t dt)
{
    (void)dev;
    return ir_dtype_valid(dt);
}

/* ---- Buffers ---- */

void cpu_buffer_poison(cpu_buffer *b, burnc_status_t code, const char *msg)
{
    if (b->poison == BURNC_OK && code == BURNC_OK)
        return;
    free(b->poison_msg);
    b->poison = code;
    b->poison_msg = code != BURNC_OK && msg ? strdup(msg) : NULL;
}

static burnc_status_t cpu_alloc(rt_device *dev, size_t size, rt_buffer **out)
{
    (void)dev;
    /* aligned_alloc wants a multiple of the alignment; empty buffers still get an address */
    size_t padded = size > SIZE_MAX - CPU_ALIGN ? 0 : size ? (size + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN : CPU_ALIGN;
    cpu_buffer *b = calloc(1, sizeof *b);
    void *mem = padded ? aligned_alloc(CPU_ALIGN, padded) : NULL;
    if (!b || !mem) {
        free(b);
        free(mem);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", size);
    }
    b->base.size = size;
    b->base.host = mem;
    *out = &b->base;
    return BURNC_OK;
}

/* Queued work may still use the buffer (a released tensor whose consumer has not run yet, or
 * the pool's cache being emptied): wait for its last job first. */
static void cpu_free(rt_device *dev, rt_buffer *buf)
{
    if (!buf)
        return;
    cpu_buffer *b = cpu_buf(buf);
    cpu_queue_wait_buffer(cpu_dev(dev)->queue, b);
    if (!buf->external)
        free(buf->host);
    else if (buf->release)
        buf->release(buf->release_user);
    free(b->poison_msg);
    free(b);
}

static burnc_status_t cpu_wrap_host(rt_device *dev, void *ptr, size_t size, rt_buffer **out)
{
    (void)dev;
    cpu_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", sizeof *b);
    b->base.size = size;
    b->base.host = ptr;
    b->base.external = true;
    *out = &b->base;
    return BURNC_OK;
}


/* Host writes go straight into the buffer once the queued jobs that use it are done: they
 * only ever target a buffer fresh from the pool, which a queued job may still read only when
 * its tensor was released right after being used, so the wait is rare, and copying the
 * caller's data to run the write in queue order would cost every write a second copy. */
static burnc_status_t cpu_write(rt_device *dev, rt_buffer *buf, size_t offset, const void *src, size_t n)
{
    if (buf->external)
        return rt_fail(BURNC_ERR_INTERNAL, "cpu: write into caller memory");
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "write"));
    cpu_buffer *b = cpu_buf(buf);
    cpu_queue_wait_buffer(cpu_dev(dev)->queue, b);
    cpu_buffer_poison(b, BURNC_OK, NULL);
    if (n)
        memcpy((char *)buf->host + offset, src, n);
    return BURNC_OK;
}

/* A read waits for the buffer's last job (its producer or a later reader), not the whole queue;
 * a failed producer's error comes back here. */
static burnc_status_t cpu_read(rt_device *dev, rt_buffer *buf, size_t offset, void *dst, size_t n)
{
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "read"));
    cpu_buffer *b = cpu_buf(buf);
    cpu_queue_wait_buffer(cpu_dev(dev)->queue, b);
    if (b->poison)
        return rt_fail(b->poison, "%s", b->poison_msg ? b->poison_msg : "earlier failure");
    if (n)
        memcpy(dst, (const char *)buf->host + offset, n);
    return BURNC_OK;
}

/* ---- Kernels ---- */

/* Opaque records (and every record when a flush does not fuse through compile_kernel) run
 * with the reference kernels on the worker. */
static burnc_status_t cpu_compile(rt_device *dev, const ir_group *g, rt_kernel **out)
{
    (void)dev;
    if (g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "cpu: a record kernel runs one record, not %d", g->n);
    rt_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: out of memory for a kernel");
    k->kind = CPU_KERNEL_RECORD;
    *out = k;
    return BURNC_OK;
}

static burnc_status_t cpu_launch(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs)
{
    if (k->kind != CPU_KERNEL_RECORD || g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "cpu: launch of a group this kernel was not compiled for");
    return cpu_queue_record(cpu_dev(dev)->queue, g->recs[0], bufs[0]);
}

static void cpu_kernel_free(rt_device *dev, rt_kernel *k)
{
    (void)dev;
    /* record kernels only: compiled ones belong to the device's kernel cache; queued jobs
     * hold copies of their records, never the kernel */
    free(k);
}

static burnc_status_t cpu_compile_kernel(rt_device *dev, const kir_kernel *k, uint64_t key, rt_kernel **out)
{
    return cpu_kernel_get(&cpu_dev(dev)->kernels, k, key, 0, out);
}

/* Autotune picks the code width, the task size and the store kind (tune.c); a width other
 * than the default is another compiled kernel of the same structure. */
static burnc_status_t cpu_launch_kernel(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                                        rt_buffer *const *outs, bool epilogue)
{
    if (k->kind != CPU_KERNEL_COMPILED)
        return rt_fail(BURNC_ERR_INTERNAL, "cpu: launch_kernel of a record kernel");
    cpu_params p;
    RT_TRY(cpu_tune_choose(dev, &k->ir, k->node.key, args, true, &p, NULL));
    if (p.width != (k->width ? k->width : cpu_default_width()))
        RT_TRY(cpu_kernel_get(&cpu_dev(dev)->kernels, &k->ir, k->node.key, p.width, &k));
    kir_args a = *args;
    a.stream = cpu_stream_bits(&k->ir, p.stream);
    return cpu_queue_kernel(cpu_dev(dev)->queue, k, &a, &p, ins, outs, epilogue);
}

static burnc_status_t cpu_sync(rt_device *dev) { return cpu_queue_sync(cpu_dev(dev)->queue); }

static const char *cpu_autotune_fingerprint(rt_device *dev)
{
    (void)dev;
    return cpu_tune_fingerprint();
}

static bool cpu_fusion_enabled(rt_device *dev) { return atomic_load(&cpu_dev(dev)->fuse); }

static void cpu_set_fusion(rt_device *dev, bool enabled) { atomic_store(&cpu_dev(dev)->fuse, enabled); }

/* Model and instruction-set flags: compiled code is only valid on the same kind of CPU. */
static void cpu_fingerprint(rt_device *dev, char *out, size_t cap)
{
    (void)dev;
    char model[256], flags[4096];
    cpuinfo_field("model name", model, sizeof model);
    cpuinfo_field("flags", flags, sizeof flags);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = flags; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    if (cap)
        snprintf(out, cap, "cpu/%s/%016llx/%s", model, (unsigned long long)h, BURNC_VERSION);
}

const rt_backend rt_cpu_backend = {
    .kind = "cpu",
    .type = BURNC_DEVICE_CPU,
    .enumerate = cpu_enumerate,
    .open = cpu_open,
    .close = cpu_close,
    .supports_dtype = cpu_supports_dtype,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .wrap_host = cpu_wrap_host,
    .write = cpu_write,
    .read = cpu_read,
    .compile = cpu_compile,
    .launch = cpu_launch,
    .kernel_free = cpu_kernel_free,
    .sync = cpu_sync,
    .fingerprint = cpu_fingerprint,
    .compile_kernel = cpu_compile_kernel,
    .launch_kernel = cpu_launch_kernel,
    .fusion_enabled = cpu_fusion_enabled,
    .set_fusion = cpu_set_fusion,
    .autotune_fingerprint = cpu_autotune_fingerprint,
    .tune_kernel = cpu_tune_kernel,
};
