/* Runtime internals: devices, storages, tensors, the backend interface, the pool, errors. */
#ifndef BURNC_RT_H
#define BURNC_RT_H

#include <stdatomic.h>
#include <threads.h>

#include "ir.h"

typedef struct rt_device rt_device;
typedef struct rt_kernel rt_kernel; /* backend-defined: a compiled group, launched many times */

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

/* What every backend implements; `static const` tables with designated initializers. */
typedef struct rt_backend {
    const char *kind; /* "ref", "cpu", "cuda", "vulkan" */
    burnc_device_type_t type;
    /* Available devices of this kind into out[0..cap); returns how many exist. */
    int (*enumerate)(burnc_device_info_t *out, int cap);
    /* Opens device number `index`: sets dev->impl and dev->name. BURNC_ERR_UNAVAILABLE with a
     * reason when the hardware, driver or library is missing. */
    burnc_status_t (*open)(rt_device *dev, int index);
    void (*close)(rt_device *dev);
    bool (*supports_dtype)(rt_device *dev, burnc_dtype_t dt);
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
} rt_backend;

extern const rt_backend rt_ref_backend;

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

struct rt_device {
    atomic_int refs; /* handles + storages */
    const rt_backend *be;
    void *impl;
    burnc_device_type_t type;
    int index;
    char spec[32];
    char name[128];
    burnc_dtype_t float_dtype, int_dtype;
    atomic_bool initialized; /* a tensor was made: configure is locked */
    mtx_t lock;              /* the stream, rng state */
    mtx_t exec_lock;         /* one flush at a time, in order */
    rt_stream stream;
    uint64_t seed, rng_counter;
    rt_pool pool;
    rt_kernel_entry *kernels; /* compiled kernels by structure key */
    burnc_status_t pending_error; /* first execution error since the last sync */
    char pending_msg[512];
    struct rt_device *next; /* registry list */
};

/* Storage: a buffer, or the promise of one from a pending record. */
typedef struct rt_storage {
    atomic_int refs;    /* tensors + records that use it */
    atomic_int holders; /* tensor handles: the user still holds it */
    rt_device *dev;
    size_t nbytes;
    rt_buffer *buf;         /* NULL until materialized */
    ir_record *producer;    /* the pending record that writes it, or NULL */
    bool needed;            /* flush scratch: some live consumer or holder needs it */
    burnc_status_t poison;  /* execution error of its producer */
    char *poison_msg;
} rt_storage;

struct burnc_tensor {
    atomic_int refs;
    burnc_dtype_t dtype;
    ir_view view;
    rt_storage *st;
    bool scoped; /* owned by the scope it was created in */
};

/* ---- Errors (runtime/error.c) ------------------------------------------------------------ */
/* Sets the thread's last error and returns code. */
burnc_status_t rt_fail(burnc_status_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
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
/* Records an execution error on the device for the next sync. */
void rt_device_set_error(rt_device *dev, burnc_status_t code, const char *msg);

/* ---- Pool (runtime/pool.c) --------------------------------------------------------------- */
void rt_pool_init(rt_pool *p);
burnc_status_t rt_pool_alloc(rt_device *dev, size_t size, rt_buffer **out);
void rt_pool_free(rt_device *dev, rt_buffer *buf);
void rt_pool_trim(rt_device *dev);
void rt_pool_report(rt_device *dev, burnc_memory_report_t *out);

/* ---- Storage and tensors (runtime/tensor.c) ---------------------------------------------- */
rt_storage *rt_storage_new(rt_device *dev, size_t nbytes);
void rt_storage_retain(rt_storage *st);
void rt_storage_release(rt_storage *st);
/* A new tensor handle over st (takes a holder reference on st), registered in the current
 * scope. */
burnc_tensor_t *rt_tensor_new(rt_storage *st, burnc_dtype_t dtype, const ir_view *view);
rt_device *rt_tensor_dev(const burnc_tensor_t *t);

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
/* Runs every pending record of dev. */
burnc_status_t rt_flush(rt_device *dev);

/* ---- Scopes (runtime/scope.c) ------------------------------------------------------------ */
void rt_scope_register(burnc_tensor_t *t);
/* While suspended (nestable), new handles are not registered: composites use it for their
 * intermediates. */
void rt_scope_suspend(void);
void rt_scope_resume(void);

#endif
