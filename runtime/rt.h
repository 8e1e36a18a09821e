/* Runtime internals: devices, storages, tensors, the backend interface, the pool, errors. */
#ifndef BURNC_RT_H
#define BURNC_RT_H

#include <stdatomic.h>
#include <threads.h>

#include "ir.h"
#include "kernel.h"

typedef struct burnc_device rt_device;
typedef struct rt_kernel rt_kernel; /* backend-defined: a compiled group, launched many times */

/* A backend's compiled kernels by structure key (kir_hash): chains in a power-of-two array that
 * doubles as it fills. A backend's struct rt_kernel begins with an rt_ktable_node, so the table
 * knows nothing else of it. Not locked: the backend holds its own lock around every call. */
typedef struct rt_ktable_node {
    uint64_t key;
    struct rt_ktable_node *next;
} rt_ktable_node;
typedef struct rt_ktable {
    int n, cap;
    rt_ktable_node **slots;
} rt_ktable;
/* The chain key falls in (NULL when empty): the caller walks ->next and compares keys. */
rt_ktable_node *rt_ktable_chain(const rt_ktable *t, uint64_t key);
bool rt_ktable_insert(rt_ktable *t, rt_ktable_node *n); /* false: out of memory */
/* Calls drop on every node, then frees the array: the table is empty again. */
void rt_ktable_clear(rt_ktable *t, void (*drop)(rt_ktable_node *n, void *user), void *user);

/* A device buffer. Backends allocate it (possibly embedded in a larger struct of their own)
 * and fill `size`; `host` is its address when the host can read and write it directly. */
typedef struct rt_buffer {
    size_t size;
    void *host;
    bool external;            /* wraps caller memory: never pooled, never written */
    void (*release)(void *);  /* external only: called when freed */
    void *release_user;
    struct rt_buffer *next;   /* pool's cache list */
} rt_buffer;

struct at_outcome; /* autotune/autotune.h */

/* What every backend implements; `static const` tables with designated initializers. */
typedef struct rt_backend {
    const char *kind; /* "ref", "cpu", "cuda", "vulkan" */
    burnc_device_type_t type;
    /* launch only queues the work: the device runs it while the host goes on (cuda, vulkan);
     * false where a flush runs its kernels on the calling thread (cpu, ref) */
    bool queued;
    /* Available devices of this kind into out[0..cap); returns how many exist. */
    int (*enumerate)(burnc_device_info_t *out, int cap);
    /* Opens device number `index`: sets dev->impl and dev->name. BURNC_ERR_UNAVAILABLE with a
     * reason when the hardware, driver or library is missing. */
    burnc_status_t (*open)(rt_device *dev, int index);
    void (*close)(rt_device *dev);
    bool (*supports_dtype)(rt_device *dev, burnc_dtype_t dt);
    /* burnc_device_flushes_denormals; NULL: never (denormals preserved) */
    bool (*flushes_denormals)(rt_device *dev, burnc_dtype_t dt);
    /* Raw buffers; the runtime pools them. */
    burnc_status_t (*alloc)(rt_device *dev, size_t size, rt_buffer **out);
    void (*free)(rt_device *dev, rt_buffer *buf);
    /* Wraps host memory without a copy; NULL when the device cannot use host memory. */
    burnc_status_t (*wrap_host)(rt_device *dev, void *ptr, size_t size, rt_buffer **out);
    burnc_status_t (*write)(rt_device *dev, rt_buffer *buf, size_t offset, const void *src, size_t n);
    burnc_status_t (*read)(rt_device *dev, rt_buffer *buf, size_t offset, void *dst, size_t n);
    /* Compiles a group once; launched many times with different buffers and record values
     * (extents, strides, scalars) of the same structure. */
    burnc_status_t (*compile)(rt_device *dev, const ir_group *g, rt_kernel **out);
    /* Runs a compiled group. bufs[r][k] is the buffer of record r's input k (k < n_in) and
     * bufs[r][n_in] its output. May return before the work is done (see sync). */
    burnc_status_t (*launch)(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs);
    void (*kernel_free)(rt_device *dev, rt_kernel *k);
    /* Waits for launched work; returns the first error it met. */
    burnc_status_t (*sync)(rt_device *dev);
    /* A stable string naming the hardware and its driver, for cache keys. */
    void (*fingerprint)(rt_device *dev, char *out, size_t cap);

    /* ---- Fusing backends (NULL in a backend that runs records one by one, like ref) ----
     * The flush partitions the batch with fusion/ and runs every non-opaque group through
     * these; opaque groups (matmul, cat, pad, index ops) still go through compile/launch. */
    /* The compiled form of kernel `k` whose kir_hash is `key`: the backend keeps compiled
     * kernels by structure (memory, then its disk cache), so the same structure compiles once
     * per device. The kernel belongs to the device and lives until it closes. */
    burnc_status_t (*compile_kernel)(rt_device *dev, const kir_kernel *k, uint64_t key, rt_kernel **out);
    /* Launches a compiled kernel. `args` holds the values of this launch (extents, offsets,
     * strides, scalars); its inputs/outputs addresses are ignored: the backend takes them from
     * ins[0..n_inputs) and outs[0..n_outputs). The backend copies what it keeps, so every
     * array may be freed on return. May return before the work is done (see sync). epilogue:
     * fusion marked the kernel as the epilogue of the matmul launched just before it
     * (fus_group.epilogue); the backend may run it on that matmul's tiles. */
    burnc_status_t (*launch_kernel)(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                                    rt_buffer *const *outs, bool epilogue);
    /* Whether flushes fuse (false: eager, one kernel per record). Starts from BURNC_FUSION
     * (rt_fusion_default) at open; burnc_device_set_fusion changes it. */
    bool (*fusion_enabled)(rt_device *dev);
    void (*set_fusion)(rt_device *dev, bool enabled);
    /* burnc_device_set_matmul_tf32 (NULL: the device has no TF32 and ignores it). */
    void (*set_matmul_tf32)(rt_device *dev, bool allow);

    /* ---- Autotune (NULL where nothing is tuned) ---- */
    /* The fingerprint autotune decisions of this device are stored under. */
    const char *(*autotune_fingerprint)(rt_device *dev);
    /* Tunes kernel k for the layout of args (buffers ignored: tuning runs on private ones),
     * as a launch with BURNC_AUTOTUNE=on would, and stores the decision; out (may be NULL)
     * says what was decided. For burnc-tune --file. */
    burnc_status_t (*tune_kernel)(rt_device *dev, const kir_kernel *k, const kir_args *args,
                                  struct at_outcome *out);

    /* ---- Measuring (NULL where the host's memory probes are the yardstick) ---- */
    /* Median seconds of `reps` device-to-device copies of `bytes` bytes with the device's own
     * copy engine or command (cuMemcpyDtoDAsync, vkCmdCopyBuffer), timed on the device, on
     * private buffers: the bandwidth limit burnc-bench compares kernels with. */
    burnc_status_t (*copy_time)(rt_device *dev, size_t bytes, int reps, double *seconds);
    /* burnc_device_timer_start (stop false) and _stop (stop true), after the flush, with
     * exec_lock held: marks the device's stream after the work launched so far; a stop waits
     * for its mark and gives the seconds since the start's. */
    burnc_status_t (*timer_mark)(rt_device *dev, bool stop, double *seconds);
} rt_backend;

extern const rt_backend rt_ref_backend;
extern const rt_backend rt_cpu_backend;
extern const rt_backend rt_vulkan_backend;
extern const rt_backend rt_cuda_backend;

/* Runs one record synchronously with the reference kernels (runtime/ref/run.c), for backends
 * that execute opaque records (matmul, cat, pad, index ops) on the host: bufs[k] is input k's
 * buffer (k < rec->n_in), bufs[rec->n_in] the output's; every buffer needs a host address.
 * Only the record's values are read, never its storages. BURNC_OK or a status set through
 * rt_fail (BURNC_ERR_INDEX for an index out of range). Thread safe. */
burnc_status_t rt_ref_run_record(const ir_record *rec, rt_buffer *const *bufs);

/* Size-class pool of one device's buffers. */
typedef struct rt_pool {
    mtx_t lock;
    rt_buffer *cached;
    uint64_t in_use, cached_bytes, peak, buffers;
} rt_pool;

/* A record list with an arena; swapped out whole at flush. */
typedef struct rt_stream {
    ir_record **recs;
    int n, cap;
    struct rt_arena_block *arena;
} rt_stream;

typedef struct rt_kernel_entry rt_kernel_entry;

struct burnc_device {
    atomic_int refs;    /* user handles + storages */
    atomic_int handles; /* user handles: when they are gone, pending work is flushed */
    const rt_backend *be;
    void *impl;
    burnc_device_type_t type;
    int index;
    char spec[64];
    char name[128];
    burnc_dtype_t float_dtype, int_dtype;
    atomic_bool initialized; /* a tensor was made: configure is locked */
    mtx_t lock;              /* the stream, rng state */
    mtx_t exec_lock;         /* one flush at a time, in order */
    rt_stream stream;
    uint64_t seed, rng_counter;
    rt_pool pool;
    rt_kernel_entry *kernels; /* compiled kernels by structure key */
    /* Under exec_lock: the structure keys of the kernels last launched with outputs in place,
     * by the key of the plan's kernel (run_group): hashing the whole kernel again cost more than
     * the rest of a small launch. */
    struct rt_in_place_key {
        bool used;
        uint8_t in_place[KIR_MAX_OUTPUTS];
        uint64_t base, key;
    } in_place_keys[4];
    burnc_status_t pending_error; /* first execution error since the last sync */
    bool timing;                  /* burnc_device_timer_start marked the stream (exec_lock) */
    char pending_msg[512];
    struct burnc_device *next; /* registry list */
    /* Autodiff handles (burnc_device_autodiff) are separate structs with only refs and these
     * set: they share `base`'s stream and memory. Public device functions resolve a handle
     * with rt_dev; the runtime below them only ever sees base devices. */
    struct burnc_device *base; /* the device an autodiff handle stands for; NULL on a device */
    int checkpointing;         /* autodiff handles: burnc_checkpointing_t */
};

/* The device a handle stands for (NULL stays NULL). */
static inline rt_device *rt_dev(const burnc_device_t *d) { return (rt_device *)(d && d->base ? d->base : d); }

/* Storage: a buffer, or the promise of one from a pending record. */
typedef struct rt_storage {
    atomic_int refs;    /* tensors + records that use it */
    atomic_int holders; /* tensor handles: the user still holds it */
    rt_device *dev;
    size_t nbytes;
    rt_buffer *buf;         /* NULL until materialized */
    ir_record *producer;    /* the pending record that writes it, or NULL */
    bool needed;            /* flush scratch: some live consumer or holder needs it */
    int flush_refs;         /* flush scratch: references held by the batch's records */
    int last_reader;        /* flush scratch: the last group of the plan that reads it */
    int batch_index;        /* flush scratch: its producer's index in the batch */
    burnc_status_t poison;  /* execution error of its producer */
    char *poison_msg;
} rt_storage;

struct burnc_tensor {
    atomic_int refs;
    burnc_dtype_t dtype;
    ir_view view;
    rt_storage *st;
    bool scoped; /* owned by the scope it was created in */
    struct ad_node *ad;   /* the tape node that made it when it tracks gradients, else NULL */
    rt_device *ctx;       /* the autodiff handle it was made on (a reference), else NULL */
};

/* ---- Autodiff hooks (autodiff/tape.c) ----------------------------------------------------
 * Op recorders call rt_ad_wanted on the tensors an op read and, when it says so, ad_track on
 * the result (autodiff/ad.h): the result then tracks gradients. Cheap when nothing tracks. */
extern _Thread_local int ad_no_grad_depth;
static inline bool rt_ad_wanted(int n, burnc_tensor_t *const *ins)
{
    /* the thread-local depth last: it costs a call in a shared library */
    for (int k = 0; k < n; k++)
        if (ins[k] && ins[k]->ad)
            return !ad_no_grad_depth;
    return false;
}
/* Gives t the autodiff context ctx (NULL: none), retaining it. */
void rt_tensor_set_ctx(burnc_tensor_t *t, rt_device *ctx);

/* ---- Errors (runtime/error.c) ------------------------------------------------------------ */
/* Sets the thread's last error and returns code. */
burnc_status_t rt_fail(burnc_status_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Saves and restores the thread's last error around work whose failures are reported later. */
typedef struct rt_error_state {
    burnc_status_t code;
    char msg[512];
} rt_error_state;
void rt_error_save(rt_error_state *s);
void rt_error_restore(const rt_error_state *s);
/* Formats a shape as "[2,3]" into buf. */
const char *rt_shape_str(char *buf, size_t cap, int rank, const int64_t *shape);
#define RT_TRY(expr)                      \
    do {                                  \
        burnc_status_t rt_s_ = (expr);    \
        if (rt_s_ != BURNC_OK) return rt_s_; \
    } while (0)
void rt_log(const char *topic, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool rt_log_enabled(const char *topic);

/* ---- Devices (runtime/device.c) ---------------------------------------------------------- */
void rt_device_mark_used(rt_device *dev);
void rt_device_unref(rt_device *dev);
/* Records an execution error on the device for the next sync. */
void rt_device_set_error(rt_device *dev, burnc_status_t code, const char *msg);

/* ---- Pool (runtime/pool.c) --------------------------------------------------------------- */
void rt_pool_init(rt_pool *p);
burnc_status_t rt_pool_alloc(rt_device *dev, size_t size, rt_buffer **out);
void rt_pool_free(rt_device *dev, rt_buffer *buf);
void rt_pool_trim(rt_device *dev);
void rt_pool_report(rt_device *dev, burnc_memory_report_t *out);
/* Transfers past a buffer's end are runtime bugs: BURNC_ERR_INTERNAL keeps them visible. */
burnc_status_t rt_buffer_check(const rt_device *dev, const rt_buffer *buf, size_t offset, size_t n, const char *what);

/* ---- Storage and tensors (runtime/tensor.c) ---------------------------------------------- */
rt_storage *rt_storage_new(rt_device *dev, size_t nbytes);
void rt_storage_retain(rt_storage *st);
void rt_storage_release(rt_storage *st);
/* A new tensor handle over st (takes a holder reference on st), registered in the current
 * scope. */
burnc_tensor_t *rt_tensor_new(rt_storage *st, burnc_dtype_t dtype, const ir_view *view);
/* The first handle of st (once per storage, from rt_storage_new), kept in st's own block: no
 * allocation, never fails. Over a storage reference and holder count the caller took for it. */
burnc_tensor_t *rt_tensor_adopt(rt_storage *st, burnc_dtype_t dtype, const ir_view *view);
rt_device *rt_tensor_dev(const burnc_tensor_t *t);
/* Drops a reference without the scope rule of burnc_tensor_release. */
void rt_tensor_unref(burnc_tensor_t *t);
/* Checks a shape given by the user: rank in 0..BURNC_MAX_RANK, dimensions >= 0, element and
 * byte counts below 2^63. `op` names the public function in the message. */
burnc_status_t rt_check_shape(const char *op, int rank, const int64_t *shape, burnc_dtype_t dt);
/* Checks that dtype is a storage dtype the device supports (DEFAULT resolved first). */
burnc_status_t rt_check_dtype(const char *op, rt_device *dev, burnc_dtype_t *dt);

/* ---- Stream (runtime/stream.c) ----------------------------------------------------------- */
/* Allocates a record with n_in operands on dev's stream; the stream lock is held from begin to
 * commit. The record's output is a new storage of out_rank/out_shape and dtype. */
ir_record *rt_record_begin(rt_device *dev, ir_op op, int n_in);
void *rt_record_alloc(rt_device *dev, size_t bytes); /* arena memory for the record's params */
/* Fills in[k] from a tensor (retaining its storage) with the given view (NULL: the tensor's). */
void rt_record_input(ir_record *r, int k, const burnc_tensor_t *t, const ir_view *view);
/* Creates the output storage, appends the record, unlocks, and returns a handle to the output
 * (NULL with the last error set if the output is too large). */
burnc_tensor_t *rt_record_commit(rt_device *dev, ir_record *r);
/* Gives up a record after rt_record_begin (releases its inputs, unlocks). */
void rt_record_abort(rt_device *dev, ir_record *r);
/* Runs every pending record of dev. */
burnc_status_t rt_flush(rt_device *dev);
/* Whether a fusing device starts with fusion on: false when BURNC_FUSION is "0", "off" or "false". */
bool rt_fusion_default(void);
/* For each output slot of k, the input slots its stored values depend on (bit s: input s), so
 * that a failed input poisons only the outputs computed from it: a fused kernel may also
 * compute values that do not read it. All bits when memory is short. */
void rt_kir_output_deps(const kir_kernel *k, uint32_t out[KIR_MAX_OUTPUTS]);
void rt_stream_free(rt_stream *s);
void rt_kernels_free(rt_device *dev);

/* ---- Scopes (runtime/scope.c) ------------------------------------------------------------ */
void rt_scope_register(burnc_tensor_t *t);
/* While suspended (nestable), new handles are not registered: composites use it for their
 * intermediates. */
void rt_scope_suspend(void);
void rt_scope_resume(void);


/* ---- Op recording helpers (runtime/ops.c, runtime/views.c) ------------------------------- */
/* Public op functions build their result with scopes suspended (intermediates are internal
 * references dropped with rt_tensor_unref) and register only what they return. */
#define RT_PUBLIC(call)                           \
    do {                                          \
        rt_scope_suspend();                       \
        burnc_tensor_t *rt_out_ = (call);         \
        rt_scope_resume();                        \
        if (rt_out_)                              \
            rt_scope_register(rt_out_);           \
        return rt_out_;                           \
    } while (0)

/* Normalizes axis in -rank..rank-1 (for insertion points pass rank + 1). */
burnc_status_t rt_axis(const char *op, int axis, int rank, int *out);
/* A new handle over x's storage with another view. */
burnc_tensor_t *rt_view(burnc_tensor_t *x, const ir_view *v);
/* out (a view of x's values with out's shape, or NULL), tracked as a reshape of x when x
 * tracks gradients. */
burnc_tensor_t *rt_ad_reshape(burnc_tensor_t *x, burnc_tensor_t *out);
/* x converted to dt (a new reference; x itself retained when it already has dt). */
burnc_tensor_t *rt_cast(burnc_tensor_t *x, burnc_dtype_t dt);
/* The internal (unregistered) forms the composites and other ops build on. */
burnc_tensor_t *rt_expand_view(burnc_tensor_t *x, int rank, const int64_t *shape, const char *op);
burnc_tensor_t *rt_unsqueeze(burnc_tensor_t *x, int axis);
burnc_status_t rt_slice_bounds(const char *op, int64_t n, int64_t start, int64_t stop, int64_t step,
                               int64_t *first, int64_t *count);
burnc_status_t rt_axes_mask(const char *op, int naxes, const int *axes, int rank, uint32_t *mask);

#endif
