/* The cpu device's in-order queue: launches return at once and one worker thread runs the
 * jobs in the order they were queued, each kernel split across the thread pool. A job holds
 * copies of everything it reads (the record or the launch arguments) because the flush that
 * queued it frees its batch before the job runs. Buffers outlive their jobs: pooled buffers
 * are only reused by later jobs (which the order makes safe) and the host waits for a buffer's
 * last job before it writes, reads or frees it (cpu_queue_wait_buffer). */
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"

typedef enum job_kind { JOB_RECORD, JOB_KERNEL } job_kind;

struct cpu_job {
    cpu_job *next;
    cpu_job *epilogue; /* JOB_RECORD of a float matmul: a kernel run on its output tiles */
    uint64_t seq;
    job_kind kind;
    int n_in, n_out;
    rt_buffer **bufs; /* n_in inputs, then n_out outputs */
    ir_record rec;    /* JOB_RECORD: storages cleared, arrays in data[] */
    rt_kernel *kernel; /* JOB_KERNEL */
    kir_args args;     /* JOB_KERNEL: arrays in data[] */
    cpu_params params; /* JOB_KERNEL */
    alignas(16) unsigned char data[];
};

struct cpu_queue {
    mtx_t lock;
    cnd_t work;     /* a job arrived, or stop */
    cnd_t progress; /* a job finished */
    cpu_job *head, *tail;
    /* Sequence numbers of the last job queued and finished: written under the lock, read
     * without it by spinning threads. */
    _Atomic uint64_t queued, done;
    bool stop;
    /* A signal costs a system call, and waking a sleeping thread ~10-15 us on a 16-core host:
     * more than a small kernel. So the worker and waiting threads spin a little before they
     * sleep, and signals go only to threads that sleep. */
    bool worker_idle; /* the worker waits on `work` */
    cpu_job *held;    /* a float matmul not queued yet: the next kernel may be its epilogue */
    int waiters;      /* threads waiting on `progress` */
    burnc_status_t error; /* first execution error since the last sync */
    char msg[512];
    cpu_threads *threads;
    thrd_t worker;
};

/* ---- Building jobs ---- */

/* Lays out a job's arrays in one allocation: a first pass sizes, a second carves. */
typedef struct layout {
    unsigned char *base;
    size_t used;
} layout;

static void *carve(layout *l, size_t bytes)
{
    l->used = (l->used + 15) & ~(size_t)15;
    void *p = l->base ? l->base + l->used : NULL;
    l->used += bytes;
    return p;
}

static cpu_job *job_alloc(size_t data_bytes)
{
    cpu_job *j = calloc(1, sizeof *j + data_bytes);
    if (!j)
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: out of memory for a launch");
    return j;
}

static void record_arrays(layout *l, cpu_job *j, const ir_record *rec)
{
    ir_operand *in = carve(l, (size_t)rec->n_in * sizeof *in);
    int64_t *pads = rec->pads ? carve(l, 2 * (size_t)rec->out_rank * sizeof *pads) : NULL;
    rt_buffer **bufs = carve(l, ((size_t)rec->n_in + 1) * sizeof *bufs);
    if (!j)
        return;
    j->rec = *rec;
    j->rec.out = NULL;
    j->rec.in = in;
    j->rec.pads = pads;
    for (int k = 0; k < rec->n_in; k++) {
        in[k] = rec->in[k];
        in[k].storage = NULL; /* the job must never reach a storage: it may be gone */
    }
    if (pads)
        memcpy(pads, rec->pads, 2 * (size_t)rec->out_rank * sizeof *pads);
    j->bufs = bufs;
}

static void kernel_arrays(layout *l, cpu_job *j, const kir_kernel *k, const kir_args *a, rt_buffer *const *ins,
                          rt_buffer *const *outs)
{
    size_t ni = (size_t)k->n_inputs, no = (size_t)k->n_outputs, r = (size_t)k->rank;
    void **inputs = carve(l, ni * sizeof *inputs);
    void **outputs = carve(l, no * sizeof *outputs);
    int64_t *extents = carve(l, r * sizeof *extents);
    int64_t *in_offsets = carve(l, ni * sizeof *in_offsets);
    int64_t *in_strides = carve(l, ni * r * sizeof *in_strides);
    int64_t *out_offsets = carve(l, no * sizeof *out_offsets);
    int64_t *out_strides = carve(l, no * r * sizeof *out_strides);
    kir_scalar *scalars = carve(l, (size_t)k->n_scalars * sizeof *scalars);
    rt_buffer **bufs = carve(l, (ni + no) * sizeof *bufs);
    if (!j)
        return;
    for (size_t i = 0; i < ni; i++) {
        bufs[i] = ins[i];
        inputs[i] = ins[i]->host;
    }
    for (size_t o = 0; o < no; o++) {
        bufs[ni + o] = outs[o];
        outputs[o] = outs[o]->host;
    }
    /* memcpy of zero bytes still wants valid pointers: copy only what exists */
    if (r) {
        memcpy(extents, a->extents, r * sizeof *extents);
        if (ni)
            memcpy(in_strides, a->in_strides, ni * r * sizeof *in_strides);
        if (no)
            memcpy(out_strides, a->out_strides, no * r * sizeof *out_strides);
    }
    if (ni)
        memcpy(in_offsets, a->in_offsets, ni * sizeof *in_offsets);
    if (no)
        memcpy(out_offsets, a->out_offsets, no * sizeof *out_offsets);
    if (k->n_scalars)
        memcpy(scalars, a->scalars, (size_t)k->n_scalars * sizeof *scalars);
    j->args = (kir_args){.inputs = inputs, .outputs = outputs, .extents = extents, .in_offsets = in_offsets,
                         .in_strides = in_strides, .out_offsets = out_offsets, .out_strides = out_strides,
                         .scalars = scalars, .stream = a->stream};
    j->bufs = bufs;
}

/* ---- The worker ---- */

static void poison_outputs(cpu_job *j, burnc_status_t code, const char *msg)
{
    for (int o = 0; o < j->n_out; o++)
        cpu_buffer_poison(cpu_buf(j->bufs[j->n_in + o]), code, msg);
}

/* Outputs computed from a failed input inherit its failure (for a kernel, only those whose
 * values read it: a fused kernel may also hold unrelated work); the others are cleared.
 * Returns how many outputs are left to compute. */
static int inherit_failures(cpu_job *j)
{
    int left = 0;
    for (int o = 0; o < j->n_out; o++) {
        uint32_t deps = j->kind == JOB_KERNEL ? j->kernel->out_deps[o] : UINT32_MAX;
        const cpu_buffer *bad = NULL;
        for (int k = 0; k < j->n_in && !bad; k++)
            if ((k >= 32 || (deps >> k & 1)) && cpu_buf(j->bufs[k])->poison)
                bad = cpu_buf(j->bufs[k]);
        cpu_buffer *out = cpu_buf(j->bufs[j->n_in + o]);
        if (bad) {
            cpu_buffer_poison(out, bad->poison, bad->poison_msg ? bad->poison_msg : "earlier failure");
        } else {
            cpu_buffer_poison(out, BURNC_OK, NULL);
            left++;
        }
    }
    return left;
}

/* The epilogue's rows over a final range of the matmul's output: the kernel reads that output
 * at flat position p (kernel_fits_epilogue), so its positions are the output's. */
static void epilogue_range(void *ctx, int64_t first, int64_t count)
{
    const cpu_job *e = ctx;
    e->kernel->fn.rows(&e->args, first, first + count);
}

/* Runs one job; a failure poisons its outputs and, unless it only inherited an earlier
 * failure, becomes the queue's error for the next sync. A matmul with an epilogue runs the
 * epilogue on its tiles; if the matmul does not run, neither does the epilogue (whose outputs
 * read it and so inherit its failure), except for outputs that do not read it. */
static void run_job(cpu_queue *q, cpu_job *j)
{
    cpu_job *e = j->epilogue;
    bool go = inherit_failures(j) > 0, epi_go = e && inherit_failures(e) > 0;
    burnc_status_t s = BURNC_OK;
    if (go && j->kind == JOB_KERNEL)
        s = cpu_run_kernel(q->threads, j->kernel, &j->args, &j->params);
    else if (go && cpu_gemm_handles(&j->rec)) /* float matmul */
        s = cpu_gemm_run(q->threads, &j->rec, j->bufs, epi_go ? epilogue_range : NULL, e);
    else if (go)
        s = rt_ref_run_record(&j->rec, j->bufs);
    else if (epi_go) /* only epilogue outputs that do not read the failed matmul are left */
        s = cpu_run_kernel(q->threads, e->kernel, &e->args, &e->params);
    if (s == BURNC_OK)
        return;
    const char *msg = burnc_error_message();
    poison_outputs(j, s, msg);
    if (e)
        poison_outputs(e, s, msg);
    rt_log("runtime", "cpu: %s failed: %s", j->kind == JOB_RECORD ? ir_op_name(j->rec.op) : j->kernel->ir.name,
           msg);
    mtx_lock(&q->lock);
    if (q->error == BURNC_OK) {
        q->error = s;
        snprintf(q->msg, sizeof q->msg, "%s", msg);
    }
    mtx_unlock(&q->lock);
    burnc_error_clear();
}

/* How long a thread spins before it sleeps. Measured with a 20-op chain over 4096 floats per
 * step: 31 -> 17 us per step on a 16-core host, 12 -> 7 us on a quiet 2-core VM; a VM whose
 * cores are all busy loses up to ~10 us per step instead. */
enum { SPIN_NS = 20000 };

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Spins while *v < target (at_least) or *v == target (!at_least), for SPIN_NS at most. */
static void spin(_Atomic uint64_t *v, uint64_t target, bool at_least)
{
    uint64_t start = now_ns();
    for (;;) {
        uint64_t now = atomic_load_explicit(v, memory_order_acquire);
        if (at_least ? now >= target : now != target)
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (now_ns() - start > SPIN_NS)
            return;
    }
}

static int worker_main(void *arg)
{
    cpu_queue *q = arg;
    cpu_keep_denormals();
    mtx_lock(&q->lock);
    for (;;) {
        if (!q->head && !q->stop) {
            uint64_t last = atomic_load(&q->queued);
            mtx_unlock(&q->lock);
            spin(&q->queued, last, false);
            mtx_lock(&q->lock);
        }
        while (!q->head && !q->stop) {
            q->worker_idle = true;
            cnd_wait(&q->work, &q->lock);
            q->worker_idle = false;
        }
        cpu_job *j = q->head;
        if (!j)
            break; /* stopped, and everything queued has run */
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
        mtx_unlock(&q->lock);
        run_job(q, j);
        uint64_t seq = j->seq;
        free(j->epilogue);
        free(j);
        mtx_lock(&q->lock);
        atomic_store_explicit(&q->done, seq, memory_order_release);
        if (q->waiters) {
            mtx_unlock(&q->lock);
            cnd_broadcast(&q->progress);
            mtx_lock(&q->lock);
        }
    }
    mtx_unlock(&q->lock);
    return 0;
}

/* ---- Queueing and waiting ---- */

/* Queues j (and its epilogue) under the lock; true when the worker must be woken. */
static bool push_locked(cpu_queue *q, cpu_job *j)
{
    j->seq = atomic_load(&q->queued) + 1;
    atomic_store_explicit(&q->queued, j->seq, memory_order_release);
    for (const cpu_job *x = j; x; x = x == j ? j->epilogue : NULL)
        for (int b = 0; b < x->n_in + x->n_out; b++)
            cpu_buf(x->bufs[b])->last_use = j->seq;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    return q->worker_idle;
}

/* Queues the held matmul, if any (under the lock): before anything else is queued or waited
 * for, so the order and every wait stay as if it had been queued at once. */
static bool release_held(cpu_queue *q)
{
    cpu_job *h = q->held;
    q->held = NULL;
    return h ? push_locked(q, h) : false;
}

static void push(cpu_queue *q, cpu_job *j)
{
    mtx_lock(&q->lock);
    bool wake = release_held(q);
    wake |= push_locked(q, j);
    mtx_unlock(&q->lock);
    if (wake)
        cnd_signal(&q->work);
}

/* Whether kernel job e can run as the epilogue of matmul job m, on m's output tiles as they
 * become final: e is element-wise over exactly m's output elements, reads that output through
 * one slot at flat position p (row-major, offset 0) and through no other, and writes neither
 * the matmul's operands nor (except in place at the same positions) its output. */
static bool kernel_fits_epilogue(const cpu_job *m, const cpu_job *e)
{
    const kir_kernel *k = &e->kernel->ir;
    const rt_buffer *c = m->bufs[m->n_in];
    int64_t numel = 1;
    for (int d = 0; d < m->rec.out_rank; d++)
        numel *= m->rec.out_shape[d];
    if (k->n_stages || k->n_outer != k->rank)
        return false;
    int64_t stride[BURNC_MAX_RANK], n = 1;
    for (int d = k->rank - 1; d >= 0; d--) {
        stride[d] = n;
        n *= e->args.extents[d];
    }
    if (n != numel)
        return false;
    int reads = 0;
    for (int b = 0; b < k->n_inputs + k->n_outputs; b++) {
        bool out = b >= k->n_inputs;
        int s = out ? b - k->n_inputs : b;
        if (out && (e->bufs[b] == m->bufs[0] || e->bufs[b] == m->bufs[1]))
            return false;
        if (e->bufs[b] != c)
            continue;
        const int64_t *st = (out ? e->args.out_strides : e->args.in_strides) + (size_t)s * (size_t)k->rank;
        if ((out ? e->args.out_offsets : e->args.in_offsets)[s] != 0)
            return false;
        for (int d = 0; d < k->rank; d++)
            if (e->args.extents[d] > 1 && st[d] != stride[d])
                return false;
        reads += !out;
    }
    return reads > 0;
}

burnc_status_t cpu_queue_record(cpu_queue *q, const ir_record *rec, rt_buffer *const *bufs)
{
    layout l = {0};
    record_arrays(&l, NULL, rec);
    cpu_job *j = job_alloc(l.used);
    if (!j)
        return BURNC_ERR_OUT_OF_MEMORY;
    l = (layout){.base = j->data};
    record_arrays(&l, j, rec);
    j->kind = JOB_RECORD;
    j->n_in = rec->n_in;
    j->n_out = 1;
    memcpy(j->bufs, bufs, ((size_t)rec->n_in + 1) * sizeof *j->bufs);
    if (!cpu_gemm_handles(rec)) {
        push(q, j);
        return BURNC_OK;
    }
    mtx_lock(&q->lock); /* held until the next launch shows whether it is an epilogue */
    bool wake = release_held(q);
    q->held = j;
    mtx_unlock(&q->lock);
    if (wake)
        cnd_signal(&q->work);
    return BURNC_OK;
}

burnc_status_t cpu_queue_kernel(cpu_queue *q, rt_kernel *k, const kir_args *args, const cpu_params *p,
                                rt_buffer *const *ins, rt_buffer *const *outs, bool epilogue)
{
    const kir_kernel *ir = &k->ir;
    layout l = {0};
    kernel_arrays(&l, NULL, ir, args, ins, outs);
    cpu_job *j = job_alloc(l.used);
    if (!j)
        return BURNC_ERR_OUT_OF_MEMORY;
    l = (layout){.base = j->data};
    kernel_arrays(&l, j, ir, args, ins, outs);
    j->kind = JOB_KERNEL;
    j->kernel = k;
    j->params = *p;
    j->n_in = ir->n_inputs;
    j->n_out = ir->n_outputs;
    mtx_lock(&q->lock);
    cpu_job *m = q->held;
    if (m && epilogue && kernel_fits_epilogue(m, j)) {
        q->held = NULL;
        m->epilogue = j;
        j = m;
        rt_log("fusion", "%s runs as the epilogue of the matmul before it, on its tiles", ir->name);
    } else if (epilogue) {
        rt_log("fusion", "%s, the matmul's epilogue, runs apart: it does not read the product at the positions "
                         "it writes, or writes an operand", ir->name);
    }
    bool wake = release_held(q);
    wake |= push_locked(q, j);
    mtx_unlock(&q->lock);
    if (wake)
        cnd_signal(&q->work);
    return BURNC_OK;
}

/* Waits, with the lock held, until the job numbered seq is done. */
static void wait_done(cpu_queue *q, uint64_t seq)
{
    if (atomic_load(&q->done) < seq) {
        mtx_unlock(&q->lock);
        spin(&q->done, seq, true);
        mtx_lock(&q->lock);
    }
    while (atomic_load(&q->done) < seq) {
        q->waiters++;
        cnd_wait(&q->progress, &q->lock);
        q->waiters--;
    }
}

void cpu_queue_wait_buffer(cpu_queue *q, const cpu_buffer *b)
{
    mtx_lock(&q->lock);
    if (release_held(q))
        cnd_signal(&q->work);
    wait_done(q, b->last_use);
    mtx_unlock(&q->lock);
}

void cpu_queue_drain(cpu_queue *q)
{
    mtx_lock(&q->lock);
    if (release_held(q))
        cnd_signal(&q->work);
    wait_done(q, atomic_load(&q->queued));
    mtx_unlock(&q->lock);
}

burnc_status_t cpu_queue_sync(cpu_queue *q)
{
    mtx_lock(&q->lock);
    if (release_held(q))
        cnd_signal(&q->work);
    wait_done(q, atomic_load(&q->queued));
    burnc_status_t s = q->error;
    char msg[sizeof q->msg];
    memcpy(msg, q->msg, sizeof msg);
    q->error = BURNC_OK;
    mtx_unlock(&q->lock);
    return s == BURNC_OK ? BURNC_OK : rt_fail(s, "%s", msg);
}

burnc_status_t cpu_queue_new(cpu_threads *threads, cpu_queue **out)
{
    cpu_queue *q = calloc(1, sizeof *q);
    if (!q)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: cpu: out of memory");
    q->threads = threads;
    atomic_init(&q->queued, 0);
    atomic_init(&q->done, 0);
    mtx_init(&q->lock, mtx_plain);
    cnd_init(&q->work);
    cnd_init(&q->progress);
    if (thrd_create(&q->worker, worker_main, q) != thrd_success) {
        mtx_destroy(&q->lock);
        cnd_destroy(&q->work);
        cnd_destroy(&q->progress);
        free(q);
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: cpu: cannot start the worker thread");
    }
    *out = q;
    return BURNC_OK;
}

void cpu_queue_free(cpu_queue *q)
{
    if (!q)
        return;
    mtx_lock(&q->lock);
    release_held(q);
    q->stop = true;
    cnd_signal(&q->work);
    mtx_unlock(&q->lock);
    thrd_join(q->worker, NULL);
    mtx_destroy(&q->lock);
    cnd_destroy(&q->work);
    cnd_destroy(&q->progress);
    free(q);
}
