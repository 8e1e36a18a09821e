/* A device's buffer pool: freed buffers are kept by size class for reuse until cleanup. */
#include <stdint.h>
#include <stdlib.h>

#include "rt.h"

/* Size classes of eight steps per power of two: a buffer wastes at most 1/8 of its request
 * (12.5%) above 512 bytes, and less than 64 bytes (the buffers' alignment) below. */
enum { SMALL_LIMIT = 512, SMALL_STEP = 64, STEPS_LOG2 = 3 };

static size_t size_class(size_t n)
{
    if (n <= SMALL_LIMIT)
        return (n + SMALL_STEP - 1) & ~(size_t)(SMALL_STEP - 1);
    int top = 63 - __builtin_clzll((unsigned long long)n);
    size_t step = (size_t)1 << (top - STEPS_LOG2);
    if (n > SIZE_MAX - step)
        return n; /* no class fits: the allocation fails on its own */
    return (n + step - 1) & ~(step - 1);
}

void rt_pool_init(rt_pool *p)
{
    mtx_init(&p->lock, mtx_plain);
    p->cached = NULL;
    p->in_use = p->cached_bytes = p->peak = p->buffers = 0;
}

static void note_peak(rt_pool *p)
{
    if (p->in_use + p->cached_bytes > p->peak)
        p->peak = p->in_use + p->cached_bytes;
}

burnc_status_t rt_pool_alloc(rt_device *dev, size_t size, rt_buffer **out)
{
    rt_pool *p = &dev->pool;
    size_t cls = size_class(size);
    mtx_lock(&p->lock);
    for (rt_buffer **b = &p->cached; *b; b = &(*b)->next) {
        if ((*b)->size == cls) {
            *out = *b;
            *b = (*b)->next;
            p->cached_bytes -= cls;
            p->in_use += cls;
            p->buffers++;
            mtx_unlock(&p->lock);
            return BURNC_OK;
        }
    }
    mtx_unlock(&p->lock);
    burnc_status_t s = dev->be->alloc(dev, cls, out);
    if (s != BURNC_OK) {
        /* out of memory: give the cache back and try once more */
        rt_pool_trim(dev);
        s = dev->be->alloc(dev, cls, out);
        if (s != BURNC_OK)
            return s;
    }
    (*out)->size = cls;
    mtx_lock(&p->lock);
    p->in_use += cls;
    p->buffers++;
    note_peak(p);
    mtx_unlock(&p->lock);
    return BURNC_OK;
}

void rt_pool_free(rt_device *dev, rt_buffer *buf)
{
    rt_pool *p = &dev->pool;
    mtx_lock(&p->lock);
    p->in_use -= buf->size;
    p->buffers--;
    p->cached_bytes += buf->size;
    buf->next = p->cached;
    p->cached = buf;
    mtx_unlock(&p->lock);
}

void rt_pool_trim(rt_device *dev)
{
    rt_pool *p = &dev->pool;
    mtx_lock(&p->lock);
    rt_buffer *b = p->cached;
    p->cached = NULL;
    p->cached_bytes = 0;
    mtx_unlock(&p->lock);
    while (b) {
        rt_buffer *next = b->next;
        dev->be->free(dev, b);
        b = next;
    }
}

void rt_pool_report(rt_device *dev, burnc_memory_report_t *out)
{
    rt_pool *p = &dev->pool;
    mtx_lock(&p->lock);
    out->bytes_in_use = p->in_use;
    out->bytes_cached = p->cached_bytes;
    out->bytes_peak = p->peak;
    out->buffers_in_use = p->buffers;
    mtx_unlock(&p->lock);
}

burnc_status_t rt_buffer_check(const rt_device *dev, const rt_buffer *buf, size_t offset, size_t n, const char *what)
{
    if (offset > buf->size || n > buf->size - offset)
        return rt_fail(BURNC_ERR_INTERNAL, "%s: %s of %zu bytes at %zu past a buffer of %zu bytes", dev->be->kind, what,
                       n, offset, buf->size);
    return BURNC_OK;
}
