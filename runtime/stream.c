/* The lazy stream and the flush pipeline. Records are appended under the device lock; a flush
 * takes the whole batch, decides which outputs are needed, and runs it: record by record
 * through compile/launch (the ref device), or, for a fusing backend, as the kernels of a fusion
 * plan (fusion/), opaque records still going through compile/launch. */
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "rt.h"

/* Pending records after which recording flushes by itself, counted from the last flush so
 * that every iteration of a loop is cut at the same places. */
enum { AUTO_FLUSH_RECORDS = 4096, ARENA_BLOCK = 64 * 1024 };

struct rt_arena_block {
    struct rt_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

/* One standard block kept from a freed stream for the next one: a loop that records a few ops
 * and flushes would otherwise malloc and free 64 KiB per iteration (and glibc consolidates its
 * free lists on every such free). */
static _Atomic(struct rt_arena_block *) spare_block;

static void *arena_alloc(rt_stream *s, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    struct rt_arena_block *b = s->arena;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > ARENA_BLOCK ? bytes : ARENA_BLOCK;
        struct rt_arena_block *nb = cap == ARENA_BLOCK ? atomic_exchange(&spare_block, NULL) : NULL;
        if (!nb)
            nb = malloc(sizeof *nb + cap);
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
        struct rt_arena_block *none = NULL;
        if (b->cap != ARENA_BLOCK || !atomic_compare_exchange_strong(&spare_block, &none, b))
            free(b);
    }
    free(s->recs);
    memset(s, 0, sizeof *s);
}

/* The autodiff context of the record being built on this thread (its first input's, if any):
 * the output carries it (autodiff/tape.c). One record at a time per thread, under the lock.
 * Set only from an input that has one and cleared by commit and abort, so that a record
 * without one reads it once: thread-local variables cost a call each in a shared library. */
static _Thread_local rt_device *record_ctx;

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
    if (t->ctx && !record_ctx)
        record_ctx = t->ctx;
}

/* Undoes rt_record_begin after a failure: the record stays in the arena, unused. */
void rt_record_abort(rt_device *dev, ir_record *r)
{
    for (int k = 0; k < r->n_in; k++)
        if (r->in[k].storage)
            rt_storage_release(r->in[k].storage);
    record_ctx = NULL;
    mtx_unlock(&dev->lock);
}

static bool shape_overflows(int rank, const int64_t *shape, size_t esize)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        if (__builtin_mul_overflow(n, shape[d], &n))
            return true;
    return __builtin_mul_overflow(n, (int64_t)esize, &n);
}

burnc_tensor_t *rt_record_commit(rt_device *dev, ir_record *r)
{
    rt_stream *s = &dev->stream;
    if (shape_overflows(r->out_rank, r->out_shape, ir_dtype_size(r->dtype))) {
        /* a result past 2^63 elements or bytes (broadcasts and reductions of huge views) */
        char name[48];
        snprintf(name, sizeof name, "burnc_%s", ir_op_name(r->op));
        rt_record_abort(dev, r);
        rt_check_shape(name, r->out_rank, r->out_shape, r->dtype);
        return NULL;
    }
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
    /* Once unlocked, another thread's flush may run the record and free it: take what the
     * handle needs now, and the handle's reference and holder count too, so that flush sees
     * the output as needed (and cannot free the storage) before the handle exists. Stored,
     * not added: no other thread can see the storage before the unlock. */
    ir_view v;
    ir_view_dense(&v, r->out_rank, r->out_shape);
    burnc_dtype_t dtype = r->dtype;
    atomic_store_explicit(&st->refs, 2, memory_order_relaxed);
    atomic_store_explicit(&st->holders, 1, memory_order_relaxed);
    mtx_unlock(&dev->lock);

    burnc_tensor_t *t = rt_tensor_adopt(st, dtype, &v);
    rt_device *ctx = record_ctx;
    if (ctx) {
        rt_tensor_set_ctx(t, ctx);
        record_ctx = NULL;
    }
    if (pending >= AUTO_FLUSH_RECORDS) {
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
    free(st->poison_msg);
    st->poison_msg = strdup(msg);
}

/* A failure while running: the outputs are poisoned and sync reports it. */
static void fail_outputs(rt_device *dev, rt_storage *const *outs, int n, const char *what, burnc_status_t s)
{
    const char *msg = burnc_error_message();
    for (int j = 0; j < n; j++)
        poison(outs[j], s, msg);
    rt_device_set_error(dev, s, msg);
    rt_log("runtime", "%s failed: %s", what, msg);
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
    if (s != BURNC_OK)
        fail_outputs(dev, &r->out, 1, ir_op_name(r->op), s);
}

/* ---- Which outputs are needed ---- */

/* Small batches (a loop's flush) keep their scratch on the stack. */
enum { SMALL_BATCH = 64 };

/* The index of the batch record that writes st, or -1. A storage whose producer is still set
 * is written by this batch: a flush takes every pending record, one flush at a time, and
 * clears the producers it ran; find_needed numbered the batch's outputs (a map by address
 * cost more than the rest of the analysis). */
static int producer_of(const rt_storage *st) { return st->producer ? st->batch_index : -1; }

/* outside[i]: record i's output is used by something other than this batch's records: a
 * tensor handle, or a record queued after the flush took the batch. A storage's references are
 * its tensors, the record operands that read it and its producer's one, so the references left
 * after the producer and this batch's readers are exactly those uses. The count is read once:
 * a later record took its reference while its caller still held a tensor, so one of the two is
 * always counted. live[i]: the record must run (needed outside, or read by a live record).
 * Without memory for the analysis, every record is needed. */
static void find_needed(ir_record *const *recs, int n, bool *outside, bool *live)
{
    int uses_buf[SMALL_BATCH];
    int *uses = n <= SMALL_BATCH ? memset(uses_buf, 0, sizeof uses_buf) : calloc((size_t)n, sizeof *uses);
    if (!uses) {
        for (int i = 0; i < n; i++)
            outside[i] = live[i] = true;
        return;
    }
    for (int i = 0; i < n; i++)
        recs[i]->out->batch_index = i;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < recs[i]->n_in; k++) {
            int j = producer_of(recs[i]->in[k].storage);
            if (j >= 0)
                uses[j]++;
        }
    for (int i = 0; i < n; i++)
        outside[i] = live[i] = atomic_load(&recs[i]->out->refs) - 1 - uses[i] > 0;
    for (int i = n - 1; i >= 0; i--) {
        if (!live[i])
            continue;
        for (int k = 0; k < recs[i]->n_in; k++) {
            int j = producer_of(recs[i]->in[k].storage);
            if (j >= 0)
                live[j] = true;
        }
    }
    if (uses != uses_buf)
        free(uses);
}

/* ---- Running a fusion plan ---- */

bool rt_fusion_default(void)
{
    const char *env = getenv("BURNC_FUSION");
    return !(env && (strcmp(env, "0") == 0 || strcmp(env, "off") == 0 || strcmp(env, "false") == 0));
}

burnc_status_t burnc_device_set_fusion(burnc_device_t *dev, bool enabled)
{
    if (!dev)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_set_fusion: device is NULL");
    dev = rt_dev(dev);
    /* what was recorded before the switch runs the way it was recorded */
    RT_TRY(rt_flush(dev));
    if (dev->be->set_fusion)
        dev->be->set_fusion(dev, enabled);
    return BURNC_OK;
}

burnc_status_t burnc_device_set_matmul_tf32(burnc_device_t *dev, bool allow)
{
    if (!dev)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_set_matmul_tf32: device is NULL");
    dev = rt_dev(dev);
    RT_TRY(rt_flush(dev));
    if (dev->be->set_matmul_tf32)
        dev->be->set_matmul_tf32(dev, allow);
    return BURNC_OK;
}

void rt_kir_output_deps(const kir_kernel *k, uint32_t out[KIR_MAX_OUTPUTS])
{
    uint32_t *dep = k->n_insts > 0 ? calloc((size_t)k->n_insts, sizeof *dep) : NULL;
    for (int o = 0; o < KIR_MAX_OUTPUTS; o++)
        out[o] = dep || k->n_insts == 0 ? 0 : UINT32_MAX;
    if (!dep)
        return;
    /* a stage's value may come after an instruction that reads its result: repeat until
     * nothing changes (once per stage at most) */
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < k->n_insts; i++) {
            const kir_inst *in = &k->insts[i];
            uint32_t d = 0;
            if (in->op == KIR_LOAD)
                d = 1u << in->a;
            else if (in->op == KIR_REDUCED)
                d = dep[k->stages[in->a].value];
            else if (in->op >= KIR_NEG) {
                d = dep[in->a];
                if (in->op >= KIR_ADD)
                    d |= dep[in->b];
                if (in->op >= KIR_FMA)
                    d |= dep[in->c];
            }
            changed |= d != dep[i];
            dep[i] = d;
        }
    }
    for (int s = 0; s < k->n_stores; s++)
        out[k->stores[s].slot] |= dep[k->stores[s].value];
    free(dep);
}

/* Inputs whose producer failed: outputs computed from them are poisoned, the others still
 * run (a fused kernel may hold unrelated work). A failed input without a buffer gets one, of
 * unspecified contents, so the kernel has something to read. False when no output is left. */
static bool poison_from_inputs(rt_device *dev, const fus_group *g)
{
    const kir_kernel *k = &g->kernel;
    uint32_t deps[KIR_MAX_OUTPUTS], failed = 0;
    for (int i = 0; i < k->n_inputs; i++)
        if (g->in_storage[i]->poison)
            failed |= 1u << i;
    if (!failed)
        return true;
    rt_kir_output_deps(k, deps);
    int left = 0;
    for (int j = 0; j < k->n_outputs; j++) {
        uint32_t bad = deps[j] & failed;
        if (!bad) {
            left++;
            continue;
        }
        const rt_storage *in = g->in_storage[__builtin_ctz(bad)];
        poison(g->out_storage[j], in->poison, in->poison_msg ? in->poison_msg : "earlier failure");
    }
    for (int i = 0; i < k->n_inputs && left; i++) {
        rt_storage *in = g->in_storage[i];
        if ((failed >> i & 1) && !in->buf && rt_pool_alloc(dev, in->nbytes, &in->buf) != BURNC_OK) {
            for (int j = 0; j < k->n_outputs; j++)
                if (!g->out_storage[j]->poison)
                    poison(g->out_storage[j], burnc_error_code(), burnc_error_message());
            rt_device_set_error(dev, burnc_error_code(), burnc_error_message());
            left = 0;
        }
    }
    return left > 0;
}

/* ---- In-place reuse (DESIGN.md, step 2) ---- */

/* Per storage of the batch: the references its records hold and the last group that reads
 * it: an opaque group reads its record's inputs, a kernel its input slots (which include the
 * inputs of producers it recomputes). */
static void mark_readers(ir_record *const *recs, int n, const fus_plan *p)
{
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < recs[i]->n_in; k++)
            recs[i]->in[k].storage->flush_refs = 0, recs[i]->in[k].storage->last_reader = -1;
        recs[i]->out->flush_refs = 0, recs[i]->out->last_reader = -1;
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < recs[i]->n_in; k++)
            recs[i]->in[k].storage->flush_refs++;
        recs[i]->out->flush_refs++;
    }
    for (int gi = 0; gi < p->n_groups; gi++) {
        const fus_group *g = &p->groups[gi];
        if (g->opaque) {
            const ir_record *rec = recs[g->recs[0]];
            for (int k = 0; k < rec->n_in; k++)
                rec->in[k].storage->last_reader = gi;
        } else {
            for (int i = 0; i < g->kernel.n_inputs; i++)
                g->in_storage[i]->last_reader = gi;
        }
    }
}

/* Whether input i's buffer can take output o: the storage has one owner (nothing but this
 * batch's records refers to it, so no handle or view can see it again), no later group reads
 * it, no other slot of the kernel reads it, and the output's element stores address exactly
 * the elements the input is read from, in its dtype, with no broadcast. */
static bool can_take(const fus_group *g, int gi, int o, int i, uint32_t row_inputs)
{
    const kir_kernel *k = &g->kernel;
    const rt_storage *in = g->in_storage[i], *out = g->out_storage[o];
    if (!in->buf || in->buf->external || in->poison || atomic_load(&in->holders) || in->last_reader != gi ||
        atomic_load(&in->refs) != in->flush_refs || in->buf->size < out->nbytes || out->buf ||
        k->inputs[i].dtype != k->outputs[o].dtype || (row_inputs >> i & 1) || g->in_offsets[i] != g->out_offsets[o])
        return false;
    for (int j = 0; j < k->n_inputs; j++)
        if (j != i && g->in_storage[j] == in)
            return false;
    for (int d = 0; d < k->rank; d++) {
        int64_t a = g->in_strides[i * k->rank + d], b = g->out_strides[o * k->rank + d];
        if (a != b || (a == 0 && g->extents[d] > 1))
            return false;
    }
    return true;
}

/* Sets k->in_place for the outputs that can take over an input's buffer (each input once). */
static void choose_in_place(const fus_group *g, int gi, kir_kernel *k)
{
    uint32_t deps[KIR_MAX_OUTPUTS], row_inputs = 0, taken = 0;
    bool row_out[KIR_MAX_OUTPUTS] = {false}, any_row = false;
    memset(k->in_place, 0, sizeof k->in_place);
    for (int s = 0; s < k->n_stores; s++)
        if (k->stores[s].row)
            row_out[k->stores[s].slot] = any_row = true;
    /* only row outputs pin inputs, and the dependency walk allocates: skip it without them */
    if (any_row)
        rt_kir_output_deps(k, deps);
    for (int o = 0; o < k->n_outputs; o++)
        if (row_out[o])
            row_inputs |= deps[o];
    for (int o = 0; o < k->n_outputs; o++)
        for (int i = 0; i < k->n_inputs && !row_out[o] && !k->in_place[o]; i++)
            if (!(taken >> i & 1) && can_take(g, gi, o, i, row_inputs)) {
                k->in_place[o] = (uint8_t)(i + 1);
                taken |= 1u << i;
            }
}

/* The structure key of k, the kernel of key base with in-place choices (under exec_lock). A
 * loop launches the same kernel with the same choices again and again: the key found last for
 * base and these choices is reused instead of hashing every instruction again. */
static uint64_t in_place_key(rt_device *dev, uint64_t base, const kir_kernel *k)
{
    struct rt_in_place_key *m = &dev->in_place_keys[base % (sizeof dev->in_place_keys / sizeof *dev->in_place_keys)];
    if (m->used && m->base == base && memcmp(m->in_place, k->in_place, sizeof m->in_place) == 0)
        return m->key;
    uint64_t key = kir_hash(k);
    *m = (struct rt_in_place_key){.used = true, .base = base, .key = key};
    memcpy(m->in_place, k->in_place, sizeof m->in_place);
    return key;
}

static void run_group(rt_device *dev, const fus_group *g, int gi, bool log)
{
    kir_kernel kk = g->kernel; /* the plan's kernel with this launch's in-place choices */
    const kir_kernel *k = &kk;
    rt_buffer *ins[KIR_MAX_INPUTS], *outs[KIR_MAX_OUTPUTS];
    if (!poison_from_inputs(dev, g))
        return;
    burnc_status_t s = BURNC_OK;
    for (int i = 0; i < k->n_inputs && s == BURNC_OK; i++)
        if (!(ins[i] = g->in_storage[i]->buf))
            s = rt_fail(BURNC_ERR_INTERNAL, "%s: input %d has no buffer", k->name, i);
    uint64_t key = g->key;
    if (s == BURNC_OK) {
        choose_in_place(g, gi, &kk);
        for (int j = 0; j < k->n_outputs; j++)
            if (k->in_place[j]) {
                key = in_place_key(dev, g->key, k);
                break;
            }
    }
    for (int j = 0; j < k->n_outputs && s == BURNC_OK; j++) {
        rt_storage *out = g->out_storage[j];
        if (k->in_place[j]) {
            rt_storage *in = g->in_storage[k->in_place[j] - 1];
            out->buf = in->buf; /* the input's storage is never read again: it gives its buffer up */
            in->buf = NULL;
            if (log)
                rt_log("fusion", "%s: output %d written in place of input %d", k->name, j, k->in_place[j] - 1);
        } else if (!out->buf) {
            s = rt_pool_alloc(dev, out->nbytes, &out->buf);
        }
        outs[j] = out->buf;
    }
    rt_kernel *compiled = NULL;
    if (s == BURNC_OK)
        s = dev->be->compile_kernel(dev, k, key, &compiled);
    if (s == BURNC_OK) {
        kir_args args = {.extents = g->extents, .in_offsets = g->in_offsets, .in_strides = g->in_strides,
                         .out_offsets = g->out_offsets, .out_strides = g->out_strides, .scalars = g->scalars};
        s = dev->be->launch_kernel(dev, compiled, &args, ins, outs, g->epilogue);
    }
    if (s != BURNC_OK)
        fail_outputs(dev, (rt_storage *const *)g->out_storage, k->n_outputs, k->name, s);
}

/* log: rt_log_enabled("fusion"), asked once a flush */
static void log_group(const rt_device *dev, const fus_plan *p, int gi, ir_record *const *recs, bool log)
{
    /* the op list costs a formatted print per record: a flush of small ops would spend more
     * on it than on its launch when nobody reads the log */
    if (!log)
        return;
    const fus_group *g = &p->groups[gi];
    char ops[256];
    size_t used = 0;
    ops[0] = '\0';
    for (int i = 0; i < g->n_recs && used < sizeof ops; i++)
        used += (size_t)snprintf(ops + used, sizeof ops - used, "%s%s", i ? " " : "", ir_op_name(recs[g->recs[i]]->op));
    if (g->opaque)
        rt_log("fusion", "%s group %d/%d: %s (opaque), cut: %s", dev->spec, gi + 1, p->n_groups, ops, g->why_cut);
    else
        rt_log("fusion", "%s group %d/%d: %s, %d record%s (%s), %d input%s, %d output%s%s, cut: %s", dev->spec,
               gi + 1, p->n_groups, g->kernel.name, g->n_recs, g->n_recs == 1 ? "" : "s", ops, g->kernel.n_inputs,
               g->kernel.n_inputs == 1 ? "" : "s", g->kernel.n_outputs, g->kernel.n_outputs == 1 ? "" : "s",
               g->epilogue ? ", epilogue of the matmul before it" : "", g->why_cut);
}

/* BURNC_DUMP_DIR: the plan of every flush as <spec>-flush-<n>.dot. */
static void dump_plan(const rt_device *dev, const fus_plan *p, ir_record *const *recs, int n)
{
    static atomic_int flushes;
    const char *dir = getenv("BURNC_DUMP_DIR");
    if (!dir || !*dir)
        return;
    char spec[sizeof dev->spec], path[PATH_MAX];
    snprintf(spec, sizeof spec, "%s", dev->spec);
    for (char *c = spec; *c; c++)
        if (*c == ':')
            *c = '-';
    snprintf(path, sizeof path, "%s/%s-flush-%d.dot", dir, spec, atomic_fetch_add(&flushes, 1));
    char *dot = fus_plan_dot(p, recs, n);
    FILE *f = dot ? fopen(path, "w") : NULL;
    if (f) {
        fputs(dot, f);
        fclose(f);
    } else {
        rt_log("fusion", "cannot write %s", path);
    }
    free(dot);
}

static void run_plan(rt_device *dev, ir_record *const *recs, int n, const bool *outside, const bool *live)
{
    fus_options opt = {.fuse = dev->be->fusion_enabled(dev)};
    fus_plan plan;
    burnc_status_t s = fus_partition(recs, n, outside, &opt, &plan);
    if (s != BURNC_OK) {
        /* nothing runs: every output something needs reports the failure */
        rt_fail(s, "%s: %s", dev->spec, plan.error[0] ? plan.error : "fusion failed");
        for (int i = 0; i < n; i++)
            if (live[i])
                fail_outputs(dev, &recs[i]->out, 1, "fusion", s);
        return;
    }
    dump_plan(dev, &plan, recs, n);
    mark_readers(recs, n, &plan);
    /* asked once, not per group and launch: it reads BURNC_LOG, and getenv walks the whole
     * environment (a flush of one small launch asked twice) */
    bool log = rt_log_enabled("fusion");
    for (int gi = 0; gi < plan.n_groups; gi++) {
        const fus_group *g = &plan.groups[gi];
        log_group(dev, &plan, gi, recs, log);
        if (g->opaque)
            run_record(dev, recs[g->recs[0]]);
        else
            run_group(dev, g, gi, log);
    }
    fus_plan_free(&plan);
}

burnc_status_t burnc_device_write_graph(burnc_device_t *dev, const char *path)
{
    if (!dev || !path)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_write_graph: %s is NULL", dev ? "path" : "device");
    dev = rt_dev(dev);
    /* both locks: no flush takes the records and no op is appended while they are planned */
    mtx_lock(&dev->exec_lock);
    mtx_lock(&dev->lock);
    int n = dev->stream.n;
    ir_record **recs = dev->stream.recs;
    bool *flags = malloc(2 * (size_t)(n ? n : 1) * sizeof *flags);
    fus_plan plan = {0};
    char *dot = NULL;
    burnc_status_t s = flags ? BURNC_OK : rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_write_graph: out of memory");
    if (s == BURNC_OK) {
        find_needed(recs, n, flags, flags + n);
        fus_options opt = {.fuse = dev->be->fusion_enabled && dev->be->fusion_enabled(dev)};
        s = fus_partition(recs, n, flags, &opt, &plan);
        if (s != BURNC_OK) {
            rt_fail(s, "burnc_device_write_graph: %s", plan.error[0] ? plan.error : "fusion failed");
        } else {
            dot = fus_plan_dot(&plan, recs, n);
            fus_plan_free(&plan);
            if (!dot)
                s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_write_graph: out of memory");
        }
    }
    mtx_unlock(&dev->lock);
    mtx_unlock(&dev->exec_lock);
    free(flags);
    if (s == BURNC_OK) {
        FILE *f = fopen(path, "w");
        bool ok = f && fputs(dot, f) >= 0;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok)
            s = rt_fail(BURNC_ERR_EXECUTION, "burnc_device_write_graph: cannot write %s: %s", path, strerror(errno));
    }
    free(dot);
    return s;
}

burnc_status_t rt_flush(rt_device *dev)
{
    mtx_lock(&dev->exec_lock);
    mtx_lock(&dev->lock);
    rt_stream batch = dev->stream;
    ir_record *small[SMALL_BATCH];
    if (batch.n <= SMALL_BATCH) {
        /* a loop's flush: the batch takes a copy of the list and the stream keeps it (freeing
         * it and allocating 2 KiB again each flush made glibc consolidate its free lists) */
        if (batch.n)
            memcpy(small, batch.recs, (size_t)batch.n * sizeof *small);
        batch.recs = small;
        dev->stream.n = 0;
        dev->stream.arena = NULL;
    } else {
        memset(&dev->stream, 0, sizeof dev->stream);
    }
    mtx_unlock(&dev->lock);

    int ran = 0;
    bool flags_buf[2 * SMALL_BATCH]; /* a loop's small flush allocates nothing here */
    bool *flags = !batch.n                 ? NULL
                  : batch.n <= SMALL_BATCH ? flags_buf
                                           : malloc(2 * (size_t)batch.n * sizeof *flags);
    if (batch.n && !flags) {
        /* without memory to plan, fall back to running everything, one record at a time */
        for (int i = 0; i < batch.n; i++)
            run_record(dev, batch.recs[i]);
        ran = batch.n;
    } else if (batch.n) {
        bool *outside = flags, *live = flags + batch.n;
        find_needed(batch.recs, batch.n, outside, live);
        for (int i = 0; i < batch.n; i++)
            ran += live[i];
        if (dev->be->compile_kernel) {
            run_plan(dev, batch.recs, batch.n, outside, live);
        } else {
            for (int i = 0; i < batch.n; i++)
                if (live[i])
                    run_record(dev, batch.recs[i]);
        }
    }
    for (int i = 0; i < batch.n; i++) {
        ir_record *r = batch.recs[i];
        r->out->producer = NULL;
        for (int k = 0; k < r->n_in; k++)
            rt_storage_release(r->in[k].storage);
        rt_storage_release(r->out);
    }
    if (flags != flags_buf)
        free(flags);
    if (batch.n)
        rt_log("runtime", "%s: flushed %d records, %d needed", dev->spec, batch.n, ran);
    if (batch.recs == small)
        batch.recs = NULL;
    rt_stream_free(&batch);
    mtx_unlock(&dev->exec_lock);
    return BURNC_OK;
}
