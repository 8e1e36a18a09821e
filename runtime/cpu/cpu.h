/* Private to runtime/cpu: the host device's buffers, thread pool, work queue and kernels.
 *
 * Execution model: the caller's flush compiles kernels and pushes jobs onto the device's
 * in-order queue; one worker thread runs them, splitting each kernel across the thread pool.
 * Every buffer remembers the last queued job that uses it, so the host touches a buffer
 * (write, read, free) only after that job is done, and nothing else ever waits. */
#ifndef BURNC_CPU_H
#define BURNC_CPU_H

#include "codegen/cg.h"
#include "codegen/kcache.h"
#include "llvm_module.h"
#include "rt.h"

/* ---- Buffers (backend.c) ------------------------------------------------------------------ */
typedef struct cpu_buffer {
    rt_buffer base;         /* first: the runtime sees an rt_buffer */
    uint64_t last_use;      /* sequence number of the last queued job using it (queue lock) */
    burnc_status_t poison;  /* error of the job that last wrote it; cleared by the next write */
    char *poison_msg;
} cpu_buffer;

static inline cpu_buffer *cpu_buf(rt_buffer *b) { return (cpu_buffer *)b; }
/* Sets or clears a buffer's poison (the message is copied). */
void cpu_buffer_poison(cpu_buffer *b, burnc_status_t code, const char *msg);

/* ---- Thread pool (threads.c) -------------------------------------------------------------- */
typedef struct cpu_threads cpu_threads;
/* task(ctx, i) for every i in [0, n), on any thread of the pool; tasks must be independent. */
typedef void (*cpu_task_fn)(void *ctx, int64_t i);

/* n threads in all: the caller of cpu_threads_run is one of them, n - 1 are started here. */
burnc_status_t cpu_threads_new(int n, cpu_threads **out);
void cpu_threads_free(cpu_threads *t);
int cpu_threads_count(const cpu_threads *t);
/* Runs tasks [0, n) and returns when all are done. One caller at a time (the queue's worker). */
void cpu_threads_run(cpu_threads *t, int64_t n, cpu_task_fn task, void *ctx);
/* Clears flush-to-zero and denormals-are-zero for the calling thread (DESIGN.md, Numerics):
 * a host program built with -ffast-math must not change burnc's results. */
void cpu_keep_denormals(void);
/* BURNC_NUM_THREADS when it is a positive number, else the cores this process may use. */
int cpu_thread_count_default(void);

/* ---- Compiled kernels (jit.c) -------------------------------------------------------------- */
/* The backend's rt_kernel: an opaque record run by the reference kernels, or a kernel of the
 * kernel IR compiled by LLVM (or loaded from the disk cache). */
typedef enum cpu_kernel_kind { CPU_KERNEL_RECORD, CPU_KERNEL_COMPILED } cpu_kernel_kind;

struct rt_kernel {
    rt_ktable_node node; /* first: the memory cache's chain; its key is the kir_hash */
    cpu_kernel_kind kind;
    /* CPU_KERNEL_COMPILED: */
    int width;           /* cg_cpu_options.elem_width it was compiled with (0: the default) */
    kir_kernel ir;       /* a copy: equality on lookup, and what the schedule needs */
    cg_cpu_kernel fn;
    bool from_object;    /* loaded by cg_object_load (else compiled by the LLVM module) */
    uint32_t out_deps[KIR_MAX_OUTPUTS]; /* input slots each output reads (rt_kir_output_deps) */
};

typedef struct cpu_kernel_cache {
    mtx_t lock;
    rt_ktable table;
    kc_lazy disk; /* opened on the first memory miss */
} cpu_kernel_cache;

void cpu_kernel_cache_init(cpu_kernel_cache *c);
void cpu_kernel_cache_free(cpu_kernel_cache *c);
/* Finds or builds the compiled kernel for an element-store width (0: the default): memory,
 * then the disk cache, then LLVM. */
burnc_status_t cpu_kernel_get(cpu_kernel_cache *c, const kir_kernel *k, uint64_t key, int width, rt_kernel **out);
/* The width the code generator uses by default on this host (16 with AVX-512, else 8). */
int cpu_default_width(void);

/* ---- Matmul (gemm.c) ---------------------------------------------------------------------- */
/* The size of the data caches of a level (1, 2, 3: the last), from sysfs (else defaults). */
int64_t cpu_cache_size(int level);
/* Whether cpu_gemm_run runs this record: MATMUL of f32, f64, f16 or bf16. */
bool cpu_gemm_handles(const ir_record *rec);
/* Runs a MATMUL record (bufs: a, b, out) with packed panels and the LLVM micro-kernel on the
 * pool, from the queue's worker (the pool's one caller). Each element is the fma chain of
 * include/burnc.h, so results depend neither on the pool's size nor on tuning. epi (may be
 * NULL) is the epilogue: called on the pool's threads with disjoint flat ranges [first,
 * first + count) of the output as soon as they are final (while they are in cache), every
 * element exactly once. BURNC_ERR_OUT_OF_MEMORY when panels cannot be had. */
burnc_status_t cpu_gemm_run(cpu_threads *pool, const ir_record *rec, rt_buffer *const *bufs,
                            void (*epi)(void *ctx, int64_t first, int64_t count), void *epi_ctx);

/* ---- Running a compiled kernel (schedule.c) ------------------------------------------------ */
/* How one launch runs (autotune's candidates, tune.c); none changes a result. */
typedef struct cpu_params {
    int width;         /* element-store vector lanes of the code (8, 16, 32) */
    int64_t task_work; /* positions per task of the pool; a launch smaller than half of it runs
                          inline */
    bool stream;       /* element outputs written with non-temporal stores */
} cpu_params;

/* Runs k over args on the pool with params p (NULL: the defaults). The split follows the
 * shape and p only, and reduction results follow kernel.h's order, so results do not depend
 * on the thread count or p. BURNC_ERR_OUT_OF_MEMORY when scratch for leaf results cannot be
 * had. */
burnc_status_t cpu_run_kernel(cpu_threads *t, const rt_kernel *k, const kir_args *args, const cpu_params *p);

/* ---- Autotune (tune.c) --------------------------------------------------------------------- */
struct at_outcome;
/* The parameters for launching kernel k (structure hash key) over args: a decision from
 * autotune, tuned now on private buffers when may_tune and BURNC_AUTOTUNE=on. Records the
 * launch for BURNC_AUTOTUNE_RECORD. how may be NULL. */
burnc_status_t cpu_tune_choose(rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *args,
                               bool may_tune, cpu_params *out, struct at_outcome *how);
/* kir_args.stream for k: every element output streams when stream, none otherwise. */
uint32_t cpu_stream_bits(const kir_kernel *k, bool stream);
/* The fingerprint autotune keys CPU decisions with. */
const char *cpu_tune_fingerprint(void);
/* rt_backend.tune_kernel. */
burnc_status_t cpu_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, struct at_outcome *out);

/* ---- The in-order queue (queue.c) ---------------------------------------------------------- */
typedef struct cpu_job cpu_job;
typedef struct cpu_queue cpu_queue;

burnc_status_t cpu_queue_new(cpu_threads *threads, cpu_queue **out);
/* Runs what is queued, stops the worker and frees the queue. */
void cpu_queue_free(cpu_queue *q);
/* Queues a job for an opaque record: copies the record (never its storages); bufs[k] for its
 * inputs, bufs[n_in] its output. */
burnc_status_t cpu_queue_record(cpu_queue *q, const ir_record *rec, rt_buffer *const *bufs);
/* Queues a launch of a compiled kernel with params p: copies args and p; ins/outs give the
 * buffers. An epilogue (fus_group.epilogue) runs on the tiles of the float matmul queued just
 * before it when it reads the product at the positions it writes and writes neither operand. */
burnc_status_t cpu_queue_kernel(cpu_queue *q, rt_kernel *k, const kir_args *args, const cpu_params *p,
                                rt_buffer *const *ins, rt_buffer *const *outs, bool epilogue);
/* Waits until every job queued so far that uses b is done. */
void cpu_queue_wait_buffer(cpu_queue *q, const cpu_buffer *b);
/* Waits until the queue is empty. */
void cpu_queue_drain(cpu_queue *q);
/* Drains, then returns and forgets the first execution error since the last call (set as the
 * thread's last error). */
burnc_status_t cpu_queue_sync(cpu_queue *q);

/* ---- The device (backend.c) ---------------------------------------------------------------- */
typedef struct cpu_device {
    cpu_threads *threads;
    cpu_queue *queue;
    cpu_kernel_cache kernels;
    atomic_bool fuse;
} cpu_device;

static inline cpu_device *cpu_dev(rt_device *dev) { return (cpu_device *)dev->impl; }

#endif
