/* The reference device: host memory and one plain C kernel per record, run synchronously.
 * It is the oracle every other backend is tested against, so it favours obvious over fast. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc_config.h"
#include "ref.h"

/* A "compiled" ref kernel is the loop nest of its record's op class. */
struct rt_kernel {
    ref_kernel_fn run;
};

/* Cache-line (and widest vector) alignment, as the compiled backends' buffers have. */
enum { REF_ALIGN = 64 };

static const char ref_spec[] = "ref";
static const char ref_name[] = "reference (C loops)";

static int ref_enumerate(burnc_device_info_t *out, int cap)
{
    if (out && cap >= 1) {
        out[0] = (burnc_device_info_t){.type = BURNC_DEVICE_REF};
        snprintf(out[0].spec, sizeof out[0].spec, "%s", ref_spec);
        snprintf(out[0].name, sizeof out[0].name, "%s", ref_name);
    }
    return 1;
}

/* Every index opens an independent reference device ("ref:1", ...): host memory needs no
 * hardware, and programs that move tensors between devices can be tested anywhere. */
static burnc_status_t ref_open(rt_device *dev, int index)
{
    if (index == 0)
        snprintf(dev->name, sizeof dev->name, "%s", ref_name);
    else
        snprintf(dev->name, sizeof dev->name, "%s #%d", ref_name, index);
    dev->impl = NULL;
    return BURNC_OK;
}

static void ref_close(rt_device *dev)
{
    (void)dev;
}

static bool ref_supports_dtype(rt_device *dev, burnc_dtype_t dt)
{
    (void)dev;
    return ir_dtype_valid(dt);
}

/* aligned_alloc wants a multiple of the alignment; an empty buffer still gets real memory so
 * that every buffer has a valid host pointer. 0 when the size cannot be padded. */
static size_t padded_size(size_t size)
{
    if (size > SIZE_MAX - REF_ALIGN)
        return 0;
    return size ? (size + REF_ALIGN - 1) / REF_ALIGN * REF_ALIGN : REF_ALIGN;
}

static burnc_status_t ref_alloc(rt_device *dev, size_t size, rt_buffer **out)
{
    (void)dev;
    size_t padded = padded_size(size);
    rt_buffer *buf = calloc(1, sizeof *buf);
    void *mem = padded ? aligned_alloc(REF_ALIGN, padded) : NULL;
    if (!buf || !mem) {
        free(buf);
        free(mem);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "ref: cannot allocate %zu bytes", size);
    }
    buf->size = size;
    buf->host = mem;
    *out = buf;
    return BURNC_OK;
}

static void ref_free(rt_device *dev, rt_buffer *buf)
{
    (void)dev;
    if (!buf)
        return;
    if (!buf->external)
        free(buf->host);
    else if (buf->release)
        buf->release(buf->release_user);
    free(buf);
}

static burnc_status_t ref_wrap_host(rt_device *dev, void *ptr, size_t size, rt_buffer **out)
{
    (void)dev;
    rt_buffer *buf = calloc(1, sizeof *buf);
    if (!buf)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "ref: cannot allocate %zu bytes", sizeof *buf);
    buf->size = size;
    buf->host = ptr;
    buf->external = true;
    *out = buf;
    return BURNC_OK;
}


static burnc_status_t ref_write(rt_device *dev, rt_buffer *buf, size_t offset, const void *src, size_t n)
{
    (void)dev;
    if (buf->external)
        return rt_fail(BURNC_ERR_INTERNAL, "ref: write into caller memory");
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "write"));
    if (n)
        memcpy((char *)buf->host + offset, src, n);
    return BURNC_OK;
}

static burnc_status_t ref_read(rt_device *dev, rt_buffer *buf, size_t offset, void *dst, size_t n)
{
    (void)dev;
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "read"));
    if (n)
        memcpy(dst, (const char *)buf->host + offset, n);
    return BURNC_OK;
}

static burnc_status_t ref_compile(rt_device *dev, const ir_group *g, rt_kernel **out)
{
    (void)dev;
    if (g->n != 1)
        return rt_fail(BURNC_ERR_INTERNAL, "ref: a kernel runs one record, not %d", g->n);
    ref_kernel_fn run = ref_kernel_for(g->recs[0]->op);
    if (!run)
        return rt_fail(BURNC_ERR_INTERNAL, "ref: no kernel for op %d", (int)g->recs[0]->op);
    rt_kernel *k = malloc(sizeof *k);
    if (!k)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "ref: cannot allocate %zu bytes", sizeof *k);
    k->run = run;
    *out = k;
    return BURNC_OK;
}

static burnc_status_t ref_launch(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs)
{
    (void)dev;
    /* A kernel is reused for groups of the same structure; a different op class here would
     * run the wrong loop nest over the buffers. */
    if (g->n != 1 || ref_kernel_for(g->recs[0]->op) != k->run)
        return rt_fail(BURNC_ERR_INTERNAL, "ref: launch of a group this kernel was not compiled for");
    return k->run(g->recs[0], bufs[0]);
}

static void ref_kernel_free(rt_device *dev, rt_kernel *k)
{
    (void)dev;
    free(k);
}

/* Launch runs to completion and reports its own error, so nothing is ever pending. */
static burnc_status_t ref_sync(rt_device *dev)
{
    (void)dev;
    return BURNC_OK;
}

static void ref_fingerprint(rt_device *dev, char *out, size_t cap)
{
    (void)dev;
    if (cap)
        snprintf(out, cap, "ref/%s", BURNC_VERSION);
}

const rt_backend rt_ref_backend = {
    .kind = "ref",
    .type = BURNC_DEVICE_REF,
    .enumerate = ref_enumerate,
    .open = ref_open,
    .close = ref_close,
    .supports_dtype = ref_supports_dtype,
    .alloc = ref_alloc,
    .free = ref_free,
    .wrap_host = ref_wrap_host,
    .write = ref_write,
    .read = ref_read,
    .compile = ref_compile,
    .launch = ref_launch,
    .kernel_free = ref_kernel_free,
    .sync = ref_sync,
    .fingerprint = ref_fingerprint,
};
