/* Storages and tensor handles; creation from host data; reading back. */
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "autodiff/ad.h"
#include "rt.h"

/* A storage with room for its first handle: recording makes an output and its handle
 * together, and one malloc and free an op instead of two was a good part of recording a small
 * op. The handle holds a reference on the storage, so the block goes with the storage, after
 * the handle. */
typedef struct storage_block {
    rt_storage st; /* first: the block is freed through it */
    burnc_tensor_t first;
} storage_block;

static burnc_tensor_t *first_handle(rt_storage *st) { return &((storage_block *)st)->first; }

/* Freed blocks kept per thread for the next storages: a loop frees as many outputs as it
 * records, and glibc keeps only 7 blocks of a size per thread, so most went through its arena
 * and its lock, both ways. A thread's blocks are freed when it exits. */
enum { SPARE_BLOCKS = 64 };
typedef struct spare_list {
    bool kept; /* registered to be freed at the thread's exit */
    int n;
    storage_block *b[SPARE_BLOCKS];
} spare_list;
static _Thread_local spare_list spare;
static tss_t spare_key;
static once_flag spare_once = ONCE_FLAG_INIT;
static bool spare_ok;

static void spare_free(void *p)
{
    spare_list *l = p;
    while (l->n > 0)
        free(l->b[--l->n]);
}

static void spare_init(void) { spare_ok = tss_create(&spare_key, spare_free) == thrd_success; }

static void block_free(storage_block *b)
{
#ifdef __SANITIZE_ADDRESS__
    free(b); /* sanitized builds keep nothing, so a storage used after its release is caught */
    return;
#endif
    spare_list *l = &spare;
    if (!l->kept) {
        call_once(&spare_once, spare_init);
        l->kept = spare_ok && tss_set(spare_key, l) == thrd_success;
    }
    if (l->kept && l->n < SPARE_BLOCKS)
        l->b[l->n++] = b;
    else
        free(b);
}

rt_storage *rt_storage_new(rt_device *dev, size_t nbytes)
{
    storage_block *b = spare.n > 0 ? spare.b[--spare.n] : malloc(sizeof *b);
    if (!b)
        return NULL;
    rt_storage *st = &b->st;
    *st = (rt_storage){.dev = dev, .nbytes = nbytes};
    atomic_init(&st->refs, 1);
    atomic_init(&st->holders, 0);
    atomic_fetch_add(&dev->refs, 1);
    return st;
}

void rt_storage_retain(rt_storage *st) { atomic_fetch_add(&st->refs, 1); }

void rt_storage_release(rt_storage *st)
{
    if (atomic_fetch_sub(&st->refs, 1) != 1)
        return;
    rt_device *dev = st->dev;
    if (st->buf) {
        if (st->buf->external)
            dev->be->free(dev, st->buf);
        else
            rt_pool_free(dev, st->buf);
    }
    free(st->poison_msg);
    block_free((storage_block *)st);
    rt_device_unref(dev);
}

static burnc_tensor_t *tensor_init(burnc_tensor_t *t, rt_storage *st, burnc_dtype_t dtype, const ir_view *view)
{
    atomic_init(&t->refs, 1);
    t->dtype = dtype;
    t->view = *view;
    t->st = st;
    t->scoped = false;
    t->ad = NULL;
    t->ctx = NULL;
    rt_device_mark_used(st->dev);
    rt_scope_register(t);
    return t;
}

burnc_tensor_t *rt_tensor_adopt(rt_storage *st, burnc_dtype_t dtype, const ir_view *view)
{
    return tensor_init(first_handle(st), st, dtype, view);
}

burnc_tensor_t *rt_tensor_new(rt_storage *st, burnc_dtype_t dtype, const ir_view *view)
{
    burnc_tensor_t *t = malloc(sizeof *t);
    if (!t) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc: out of memory for a tensor handle");
        return NULL;
    }
    rt_storage_retain(st);
    atomic_fetch_add(&st->holders, 1);
    return tensor_init(t, st, dtype, view);
}

rt_device *rt_tensor_dev(const burnc_tensor_t *t) { return t->st->dev; }

void rt_tensor_set_ctx(burnc_tensor_t *t, rt_device *ctx)
{
    if (t->ctx == ctx)
        return;
    if (ctx)
        burnc_device_retain(ctx);
    if (t->ctx)
        burnc_device_release(t->ctx);
    t->ctx = ctx;
}

/* Drops one reference; scopes call it directly (their reference is not the user's). */
void rt_tensor_unref(burnc_tensor_t *t)
{
    if (atomic_fetch_sub(&t->refs, 1) != 1)
        return;
    if (t->ad)
        ad_node_release(t->ad);
    if (t->ctx)
        burnc_device_release(t->ctx);
    rt_storage *st = t->st;
    atomic_fetch_sub(&st->holders, 1);
    if (t != first_handle(st))
        free(t);
    rt_storage_release(st); /* the last reference frees the first handle with the storage */
}

burnc_tensor_t *burnc_tensor_retain(burnc_tensor_t *t)
{
    if (t)
        atomic_fetch_add(&t->refs, 1);
    return t;
}

void burnc_tensor_release(burnc_tensor_t *t)
{
    /* The last reference of a scope-owned handle belongs to its scope. */
    if (!t || (t->scoped && atomic_load(&t->refs) == 1))
        return;
    rt_tensor_unref(t);
}

burnc_status_t rt_check_shape(const char *op, int rank, const int64_t *shape, burnc_dtype_t dt)
{
    if (rank < 0 || rank > BURNC_MAX_RANK)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: rank %d is outside 0..%d", op, rank, BURNC_MAX_RANK);
    if (rank > 0 && !shape)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: shape is NULL for rank %d", op, rank);
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0)
            return rt_fail(BURNC_ERR_OVERFLOW, "%s: dimension %d is negative (%lld)", op, d, (long long)shape[d]);
        if (__builtin_mul_overflow(n, shape[d], &n)) {
            char buf[200];
            return rt_fail(BURNC_ERR_OVERFLOW, "%s: shape %s has more than 2^63 elements", op,
                           rt_shape_str(buf, sizeof buf, rank, shape));
        }
    }
    int64_t bytes;
    if (__builtin_mul_overflow(n, (int64_t)ir_dtype_size(dt), &bytes)) {
        char buf[200];
        return rt_fail(BURNC_ERR_OVERFLOW, "%s: shape %s of %s needs more than 2^63 bytes", op,
                       rt_shape_str(buf, sizeof buf, rank, shape), ir_dtype_name(dt));
    }
    return BURNC_OK;
}

burnc_status_t rt_check_dtype(const char *op, rt_device *dev, burnc_dtype_t *dt)
{
    if (*dt == BURNC_DTYPE_DEFAULT)
        *dt = dev->float_dtype;
    if (!ir_dtype_valid(*dt))
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: %d is not a dtype", op, (int)*dt);
    if (!dev->be->supports_dtype(dev, *dt))
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: device %s does not support %s", op, dev->spec,
                       ir_dtype_name(*dt));
    return BURNC_OK;
}

/* A tensor over a new, already materialized storage. */
static burnc_tensor_t *tensor_with_buffer(rt_device *dev, burnc_dtype_t dt, int rank, const int64_t *shape,
                                          rt_buffer *buf)
{
    ir_view v;
    ir_view_dense(&v, rank, shape);
    rt_storage *st = rt_storage_new(dev, (size_t)ir_numel(rank, shape) * ir_dtype_size(dt));
    if (!st) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc: out of memory for a storage");
        return NULL;
    }
    st->buf = buf;
    burnc_tensor_t *t = rt_tensor_new(st, dt, &v);
    rt_storage_release(st);
    return t;
}

static burnc_status_t check_new(const char *op, rt_device *dev, burnc_dtype_t *dt, int rank, const int64_t *shape)
{
    if (!dev)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: device is NULL", op);
    RT_TRY(rt_check_dtype(op, dev, dt));
    return rt_check_shape(op, rank, shape, *dt);
}

burnc_tensor_t *burnc_tensor_from_data(burnc_device_t *handle, burnc_dtype_t dtype, int rank, const int64_t *shape,
                                       const void *data)
{
    rt_device *dev = rt_dev(handle);
    if (check_new("burnc_tensor_from_data", dev, &dtype, rank, shape) != BURNC_OK)
        return NULL;
    size_t bytes = (size_t)ir_numel(rank, shape) * ir_dtype_size(dtype);
    if (!data && bytes) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_from_data: data is NULL");
        return NULL;
    }
    rt_buffer *buf;
    if (rt_pool_alloc(dev, bytes, &buf) != BURNC_OK)
        return NULL;
    if (bytes && dev->be->write(dev, buf, 0, data, bytes) != BURNC_OK) {
        rt_pool_free(dev, buf);
        return NULL;
    }
    burnc_tensor_t *t = tensor_with_buffer(dev, dtype, rank, shape, buf);
    if (!t)
        rt_pool_free(dev, buf);
    else if (handle->base)
        rt_tensor_set_ctx(t, handle);
    return t;
}

burnc_tensor_t *burnc_tensor_wrap(burnc_device_t *handle, burnc_dtype_t dtype, int rank, const int64_t *shape,
                                  void *data, void (*release)(void *user), void *user)
{
    rt_device *dev = rt_dev(handle);
    if (check_new("burnc_tensor_wrap", dev, &dtype, rank, shape) != BURNC_OK)
        return NULL;
    size_t bytes = (size_t)ir_numel(rank, shape) * ir_dtype_size(dtype);
    if (!data && bytes) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_wrap: data is NULL");
        return NULL;
    }
    if (!dev->be->wrap_host) {
        burnc_tensor_t *t = burnc_tensor_from_data(handle, dtype, rank, shape, data);
        if (t && release)
            release(user);
        return t;
    }
    rt_buffer *buf;
    if (dev->be->wrap_host(dev, data, bytes, &buf) != BURNC_OK)
        return NULL;
    buf->external = true;
    buf->release = release;
    buf->release_user = user;
    burnc_tensor_t *t = tensor_with_buffer(dev, dtype, rank, shape, buf);
    if (!t) {
        buf->release = NULL; /* the caller keeps ownership on failure */
        dev->be->free(dev, buf);
    } else if (handle->base) {
        rt_tensor_set_ctx(t, handle);
    }
    return t;
}

int burnc_tensor_rank(const burnc_tensor_t *t) { return t ? t->view.rank : 0; }
const int64_t *burnc_tensor_shape(const burnc_tensor_t *t) { return t ? t->view.shape : NULL; }
const int64_t *burnc_tensor_strides(const burnc_tensor_t *t) { return t ? t->view.strides : NULL; }
int64_t burnc_tensor_numel(const burnc_tensor_t *t) { return t ? ir_numel(t->view.rank, t->view.shape) : 0; }
burnc_dtype_t burnc_tensor_dtype(const burnc_tensor_t *t) { return t ? t->dtype : BURNC_DTYPE_DEFAULT; }
burnc_device_t *burnc_tensor_device(const burnc_tensor_t *t)
{
    return t ? burnc_device_retain(t->ctx ? t->ctx : t->st->dev) : NULL;
}

burnc_status_t burnc_tensor_read(burnc_tensor_t *t, void *dst, size_t dst_bytes)
{
    if (!t)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_read: tensor is NULL");
    size_t esize = ir_dtype_size(t->dtype);
    size_t bytes = (size_t)burnc_tensor_numel(t) * esize;
    if (dst_bytes < bytes)
        return rt_fail(BURNC_ERR_BUFFER_TOO_SMALL, "burnc_tensor_read: the tensor has %zu bytes, the buffer %zu",
                       bytes, dst_bytes);
    if (!dst && bytes)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_read: dst is NULL");
    if (!ir_view_is_dense(&t->view)) {
        rt_scope_suspend();
        ad_no_grad_depth++; /* a copy for reading is no part of any graph */
        burnc_tensor_t *c = burnc_contiguous(t);
        ad_no_grad_depth--;
        rt_scope_resume();
        if (!c)
            return burnc_error_code();
        burnc_status_t s = burnc_tensor_read(c, dst, dst_bytes);
        rt_tensor_unref(c);
        return s;
    }
    rt_device *dev = t->st->dev;
    RT_TRY(rt_flush(dev));
    if (t->st->poison)
        return rt_fail(t->st->poison, "%s", t->st->poison_msg ? t->st->poison_msg : "earlier failure");
    if (!bytes)
        return BURNC_OK;
    return dev->be->read(dev, t->st->buf, (size_t)t->view.offset * esize, dst, bytes);
}

/* The copy keeps t's own autodiff context, moved to dev: a tracked tensor keeps tracking and
 * its gradient flows back through the copy; a plain tensor stays plain. */
static burnc_tensor_t *to_device(burnc_tensor_t *t, burnc_device_t *handle)
{
    rt_device *dev = rt_dev(handle);
    burnc_tensor_t *out = NULL;
    if (t->st->dev == dev) {
        out = rt_tensor_new(t->st, t->dtype, &t->view);
    } else {
        size_t bytes = (size_t)burnc_tensor_numel(t) * ir_dtype_size(t->dtype);
        void *host = malloc(bytes ? bytes : 1);
        if (!host) {
            rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_tensor_to_device: cannot allocate %zu bytes of host memory",
                    bytes);
            return NULL;
        }
        if (burnc_tensor_read(t, host, bytes) == BURNC_OK)
            out = burnc_tensor_from_data(dev, t->dtype, t->view.rank, t->view.shape, host);
        free(host);
    }
    if (!out || !t->ctx)
        return out;
    rt_device *ctx = t->ctx->base == dev ? t->ctx : handle->base ? handle : NULL;
    if (!ctx) {
        rt_device *made = burnc_device_autodiff(dev);
        if (!made) {
            rt_tensor_unref(out);
            return NULL;
        }
        made->checkpointing = t->ctx->checkpointing;
        rt_tensor_set_ctx(out, made);
        burnc_device_release(made);
    } else {
        rt_tensor_set_ctx(out, ctx);
    }
    return rt_ad_wanted(1, &t) ? ad_track(AD_TO_DEVICE, 1, &t, out, &(ad_params){.dev = t->st->dev}) : out;
}

burnc_tensor_t *burnc_tensor_to_device(burnc_tensor_t *t, burnc_device_t *dev)
{
    if (!t)
        return NULL;
    if (!dev) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_to_device: device is NULL");
        return NULL;
    }
    RT_PUBLIC(to_device(t, dev));
}
