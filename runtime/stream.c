/* The lazy stream: records appended under the device lock, run in order at flush. */
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* Pending records after which recording flushes by itself, counted from the last flush so
 * that every iteration of a loop is cut at the same places. */
enum { AUTO_FLUSH_RECORDS = 4096, ARENA_BLOCK = 64 * 1024 };

struct rt_arena_block {
    struct rt_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

static void *arena_alloc(rt_stream *s, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    struct rt_arena_block *b = s->arena;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > ARENA_BLOCK ? bytes : ARENA_BLOCK;
        struct rt_arena_block *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        s->arena = b = nb;
    }
    void *p = b->data + b->used;
    b->used += bytes;
    memset(p, 0, bytes);
    return p;
}

void rt_stream_free(rt_stream *s)
{
    for (struct rt_arena_block *b = s->arena, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(s->recs);
    memset(s, 0, sizeof *s);
}

ir_record *rt_record_begin(rt_device *dev, ir_op op, int n_in)
{
    mtx_lock(&dev->lock);
    ir_record *r = arena_alloc(&dev->stream, sizeof *r);
    ir_operand *in = n_in ? arena_alloc(&dev->stream, (size_t)n_in * sizeof *in) : NULL;
    if (!r || (n_in && !in)) {
        mtx_unlock(&dev->lock);
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: out of memory while recording", ir_op_name(op));
        return NULL;
    }
    r->op = op;
    r->n_in = n_in;
    r->in = in;
    return r;
}

void *rt_record_alloc(rt_device *dev, size_t bytes) { return arena_alloc(&dev->stream, bytes); }

void rt_record_input(ir_record *r, int k, const burnc_tensor_t *t, const ir_view *view)
{
    r->in[k].storage = t->st;
    r->in[k].dtype = t->dtype;
    r->in[k].view = view ? *view : t->view;
    rt_storage_retain(t->st);
}

/* Undoes rt_record_begin after a failure: the record stays in the arena, unused. */
void rt_record_abort(rt_device *dev, ir_record *r)
{
    for (int k = 0; k < r->n_in; k++)
        if (r->in[k].storage)
            rt_storage_release(r->in[k].storage);
    mtx_unlock(&dev->lock);
}

burnc_tensor_t *rt_record_commit(rt_device *dev, ir_record *r)
{
    rt_stream *s = &dev->stream;
    size_t bytes = (size_t)ir_numel(r->out_rank, r->out_shape) * ir_dtype_size(r->dtype);
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        ir_record **recs = realloc(s->recs, (size_t)cap * sizeof *recs);
        if (!recs) {
            rt_record_abort(dev, r);
            rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: out of memory while recording", ir_op_name(r->op));
            return NULL;
        }
        s->recs = recs;
        s->cap = cap;
    }
    rt_storage *st = rt_storage_new(dev, bytes);
    if (!st) {
        rt_record_abort(dev, r);
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: out of memory while recording", ir_op_name(r->op));
        return NULL;
    }
    st->producer = r;
    r->out = st; /* the record owns the storage's first reference */
    s->recs[s->n++] = r;
    int pending = s->n;
    mtx_unlock(&dev->lock);

    ir_view v;
    ir_view_dense(&v, r->out_rank, r->out_shape);
    burnc_tensor_t *t = rt_tensor_new(st, r->dtype, &v);
    if (t && pending >= AUTO_FLUSH_RECORDS) {
        rt_error_state saved;
        rt_error_save(&saved);
        rt_flush(dev); /* failures are reported by the next sync or read */
        rt_error_restore(&saved);
    }
    return t;
}

/* ---- Compiled kernels by structure ---- */
struct rt_kernel_entry {
    ir_op op;
    burnc_dtype_t dtype, compute;
    int n_in;
    uint32_t flags;
    rt_kernel *kernel;
    rt_kernel_entry *next;
};

static burnc_status_t kernel_for(rt_device *dev, const ir_group *g, rt_kernel **out)
{
    const ir_record *r = g->recs[0];
    for (rt_kernel_entry *e = dev->kernels; e; e = e->next)
        if (e->op == r->op && e->dtype == r->dtype && e->compute == r->compute && e->n_in == r->n_in &&
            e->flags == r->flags) {
            *out = e->kernel;
            return BURNC_OK;
        }
    rt_kernel_entry *e = calloc(1, sizeof *e);
    if (!e)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: out of memory for a kernel", ir_op_name(r->op));
    burnc_status_t s = dev->be->compile(dev, g, &e->kernel);
    if (s != BURNC_OK) {
        free(e);
        return s;
    }
    e->op = r->op;
    e->dtype = r->dtype;
    e->compute = r->compute;
    e->n_in = r->n_in;
    e->flags = r->flags;
    e->next = dev->kernels;
    dev->kernels = e;
    *out = e->kernel;
    return BURNC_OK;
}

void rt_kernels_free(rt_device *dev)
{
    for (rt_kernel_entry *e = dev->kernels, *next; e; e = next) {
        next = e->next;
        if (dev->be->kernel_free)
            dev->be->kernel_free(dev, e->kernel);
        free(e);
    }
    dev->kernels = NULL;
}

/* ---- Flush ---- */
static void poison(rt_storage *st, burnc_status_t code, const char *msg)
{
    st->poison = code;
    st->poison_msg = strdup(msg);
}

static void run_record(rt_device *dev, ir_record *r)
{
    rt_buffer *bufs[r->n_in + 1];
    for (int k = 0; k < r->n_in; k++) {
        rt_storage *in = r->in[k].storage;
        if (in->poison) {
            poison(r->out, in->poison, in->poison_msg ? in->poison_msg : "earlier failure");
            return;
        }
        bufs[k] = in->buf;
    }
    rt_kernel *k = NULL;
    rt_buffer *const *rec_bufs = bufs;
    ir_group g = {.n = 1, .recs = &r};
    burnc_status_t s = rt_pool_alloc(dev, r->out->nbytes, &bufs[r->n_in]);
    if (s == BURNC_OK) {
        r->out->buf = bufs[r->n_in];
        s = kernel_for(dev, &g, &k);
    }
    if (s == BURNC_OK)
        s = dev->be->launch(dev, k, &g, &rec_bufs);
    if (s != BURNC_OK) {
        poison(r->out, s, burnc_error_message());
        rt_device_set_error(dev, s, burnc_error_message());
        rt_log("runtime", "%s failed: %s", ir_op_name(r->op), burnc_error_message());
    }
}

burnc_status_t rt_flush(rt_device *dev)
{
    mtx_lock(&dev->exec_lock);
    mtx_lock(&dev->lock);
    rt_stream batch = dev->stream;
    memset(&dev->stream, 0, sizeof dev->stream);
    mtx_unlock(&dev->lock);

    /* Run a record only when a handle or a live later record needs its output. */
    for (int i = batch.n - 1; i >= 0; i--) {
        ir_record *r = batch.recs[i];
        if (!r->out->needed && atomic_load(&r->out->holders) == 0)
            continue;
        r->out->needed = true;
        for (int k = 0; k < r->n_in; k++)
            r->in[k].storage->needed = true;
    }
    int ran = 0;
    for (int i = 0; i < batch.n; i++) {
        ir_record *r = batch.recs[i];
        if (r->out->needed) {
            run_record(dev, r);
            ran++;
        }
        r->out->producer = NULL;
        for (int k = 0; k < r->n_in; k++)
            rt_storage_release(r->in[k].storage);
        rt_storage_release(r->out);
    }
    if (batch.n)
        rt_log("runtime", "%s: flushed %d records, ran %d", dev->spec, batch.n, ran);
    rt_stream_free(&batch);
    mtx_unlock(&dev->exec_lock);
    return BURNC_OK;
}
