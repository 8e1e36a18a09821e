/* Private to runtime/cuda: the CUDA driver (libcuda.so.1, opened with dlopen), the device, its
 * buffers and its compiled kernels.
 *
 * Execution model: one primary context and one stream per device. Kernels, copies and
 * stream-ordered frees go on that stream in the order the runtime asks for them, so a buffer
 * the pool hands out again is only touched after the work that used it before; the host waits
 * (an event, or the stream) only to read, to write from its pinned staging, to run an opaque
 * group on the host, and to sync. Every enqueue holds the device's lock, so nothing else lands
 * on the stream while a CUDA graph is being captured. */
#ifndef BURNC_CU_H
#define BURNC_CU_H

#include <stdatomic.h>

#include "codegen/cg.h"
#include "codegen/kcache.h"
#include "codegen/ptx.h"
#include "llvm_module.h"
#include "rt.h"

/* ---- The driver API subset, declared here (values of the driver's cuda.h) so that burnc
 * builds without the CUDA toolkit ---- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUlinkState_st *CUlinkState;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
/* cuTensorMapEncodeTiled's opaque description of a tensor for the bulk tensor copy engine */
typedef struct CUtensorMap {
    _Alignas(64) uint64_t opaque[16];
} CUtensorMap;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_ECC_UNCORRECTABLE = 214,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_NVLINK_UNCORRECTABLE = 220,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_JIT_COMPILATION_DISABLED = 223,
    CUDA_ERROR_CONTAINED = 226,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_LAUNCH_TIMEOUT = 702,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_ASSERT = 710,
    CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
    CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
    CUDA_ERROR_MISALIGNED_ADDRESS = 716,
    CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
    CUDA_ERROR_INVALID_PC = 718,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_TENSOR_MEMORY_LEAK = 721,
    CUDA_ERROR_EXTERNAL_DEVICE = 911,
    CUDA_ERROR_UNKNOWN = 999,
};

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_STREAM_NON_BLOCKING = 1,
    CU_EVENT_DEFAULT = 0,
    CU_EVENT_DISABLE_TIMING = 2,
    CU_MEMHOSTALLOC_PORTABLE = 1,
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_JIT_INPUT_PTX = 1,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
};
/* cuLaunchKernelEx's configuration, with the one attribute burnc sets */
enum { CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
typedef struct CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        _Alignas(8) char pad[64];
        int programmatic_stream_serialization_allowed;
    } value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
    CUstream stream;
    CUlaunchAttribute *attrs;
    unsigned n_attrs;
} CUlaunchConfig;
_Static_assert(sizeof(CUlaunchAttribute) == 72 && sizeof(CUlaunchConfig) == 56, "cuda.h's launch structs");
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* The entry points burnc uses, looked up by their versioned names (cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2, ...). */
typedef struct cuda_driver {
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*DeviceGetAttribute)(int *value, int attrib, CUdevice dev);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*DevicePrimaryCtxReset)(CUdevice dev);
    CUresult (*CtxSetCurrent)(CUcontext ctx);
    CUresult (*StreamCreate)(CUstream *stream, unsigned flags);
    CUresult (*StreamDestroy)(CUstream stream);
    CUresult (*StreamSynchronize)(CUstream stream);
    CUresult (*EventCreate)(CUevent *ev, unsigned flags);
    CUresult (*EventDestroy)(CUevent ev);
    CUresult (*EventRecord)(CUevent ev, CUstream stream);
    CUresult (*EventSynchronize)(CUevent ev);
    CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);
    CUresult (*MemAlloc)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr ptr);
    CUresult (*MemHostAlloc)(void **ptr, size_t bytes, unsigned flags);
    CUresult (*MemFreeHost)(void *ptr);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*MemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);
    CUresult (*ModuleLoadData)(CUmodule *mod, const void *image);
    CUresult (*ModuleLoadDataEx)(CUmodule *mod, const void *image, unsigned n, int *options, void **values);
    CUresult (*ModuleUnload)(CUmodule mod);
    CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
    CUresult (*FuncSetAttribute)(CUfunction fn, int attrib, int value);
    CUresult (*LaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, CUstream stream, void **params, void **extra);
    CUresult (*LaunchKernelEx)(const CUlaunchConfig *config, CUfunction fn, void **params, void **extra);
    CUresult (*LinkCreate)(unsigned n, int *options, void **values, CUlinkState *state);
    CUresult (*LinkAddData)(CUlinkState state, int type, void *data, size_t size, const char *name, unsigned n,
                            int *options, void **values);
    CUresult (*LinkComplete)(CUlinkState state, void **cubin, size_t *size);
    CUresult (*LinkDestroy)(CUlinkState state);
    CUresult (*GetErrorName)(CUresult r, const char **name);
    CUresult (*GetErrorString)(CUresult r, const char **text);
    CUresult (*StreamBeginCapture)(CUstream stream, int mode);
    CUresult (*StreamEndCapture)(CUstream stream, CUgraph *graph);
    CUresult (*GraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
    CUresult (*GraphLaunch)(CUgraphExec exec, CUstream stream);
    CUresult (*GraphExecDestroy)(CUgraphExec exec);
    CUresult (*GraphDestroy)(CUgraph graph);
    CUresult (*TensorMapEncodeTiled)(CUtensorMap *map, int dtype, uint32_t rank, void *address, const uint64_t *dims,
                                     const uint64_t *strides, const uint32_t *box, const uint32_t *elem_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill);
} cuda_driver;

/* ---- The driver (driver.c) ---------------------------------------------------------------- */
/* The driver, loaded and initialized once per process; NULL with the reason in why (no
 * libcuda.so.1, a missing entry point, cuInit failing: no GPU, a driver without a device). */
const cuda_driver *cuda_driver_get(char *why, size_t why_cap);
/* The status a CUresult stands for: sticky errors (the context is unusable: an illegal
 * address, a failed launch, ...) BURNC_ERR_DEVICE_LOST, out of memory BURNC_ERR_OUT_OF_MEMORY,
 * rejected code BURNC_ERR_COMPILE, no device BURNC_ERR_UNAVAILABLE, others
 * BURNC_ERR_EXECUTION. Needs no driver. */
burnc_status_t cuda_status_of(CUresult r);
bool cuda_error_is_sticky(CUresult r);
/* "CUDA_ERROR_X (the driver's text)" into buf, from the driver when it is loaded, else the
 * number. */
const char *cuda_error_text(CUresult r, char *buf, size_t cap);
/* Sets the last error: "<what>: CUDA_ERROR_X (text)" with cuda_status_of(r). */
burnc_status_t cuda_fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Buffers and the device (backend.c) --------------------------------------------------- */
typedef struct cuda_buffer {
    rt_buffer base; /* first: the runtime sees an rt_buffer (host is NULL: device memory) */
    CUdeviceptr ptr;
} cuda_buffer;

static inline CUdeviceptr cuda_ptr(const rt_buffer *b) { return ((const cuda_buffer *)b)->ptr; }

typedef struct cuda_kernel_cache {
    mtx_t lock; /* the table and the disk cache's opening; compiles run outside it */
    rt_ktable table;
    kc_lazy disk; /* opened on the first memory miss */
} cuda_kernel_cache;

enum { CUDA_GRAPH_BATCH = 64, CUDA_GRAPHS_KEPT = 16, CUDA_GRAPH_SEEN = 64 };

/* A launch waiting in the batch of a device with graphs on. */
typedef struct cuda_pending {
    CUfunction fn;
    uint32_t grid[3], block[3], shared;
    uint32_t n_words;
    size_t first_word; /* its parameter block: the batch's words[first_word..first_word + n_words) */
} cuda_pending;

typedef struct cuda_graph {
    uint64_t hash;
    CUgraphExec exec;
    uint64_t last_use;
} cuda_graph;

typedef struct cuda_device {
    const cuda_driver *cu;
    CUdevice device;
    CUcontext ctx;
    CUstream stream;
    CUevent timer[2];    /* burnc_device_timer_start and _stop's marks (made at the first) */
    bool timer_armed;    /* timer[0] goes on the stream right before the next launch */
    int cc;              /* compute capability: 10 x major + minor */
    bool pdl;            /* launches overlap their predecessor's end (cc >= 90; BURNC_CUDA_PDL=0 turns it off) */
    int sms, driver_version, max_shared_optin;
    size_t total_mem;
    char gpu_name[128];
    mtx_t lock;          /* the stream (every enqueue), the staging buffer, the batch, the kernels */
    mtx_t plan_lock;     /* the plan buffer; taken before lock, never inside it */
    cg_ptx_plan *plan;
    void *staging;       /* pinned host memory for transfers */
    size_t staging_size;
    atomic_bool lost;    /* a sticky error happened: every call fails until the device is reopened */
    char lost_msg[256];
    atomic_bool fuse;
    atomic_bool tf32;    /* f32 matmuls may run on TF32 tensor cores (BURNC_MATMUL_TF32=1, or the API) */
    struct cuda_mma_cache *mma; /* the tensor-core matmul's kernels (mma.c); NULL until the first */
    struct cuda_gemm_state *gemm; /* the SIMT matmul's kernels and held matmul (gemm.c) */
    cuda_kernel_cache kernels;
    char tune_fingerprint[384];
    int forced_candidate; /* tests: 1 + the autotune candidate every launch uses; 0: autotune decides */
    /* CUDA graphs (BURNC_CUDA_GRAPHS=1): launches wait in a batch, submitted before anything
     * else uses the stream; a batch seen before is replayed as a captured graph. */
    bool graphs;
    int n_pending;
    cuda_pending pending[CUDA_GRAPH_BATCH];
    uint64_t *words;      /* the pending launches' parameter words, kept from batch to batch */
    size_t n_words, cap_words;
    uint64_t seen[CUDA_GRAPH_SEEN];
    int n_seen;
    cuda_graph kept[CUDA_GRAPHS_KEPT];
    uint64_t graph_clock;
    uint64_t graph_replays, graph_captures; /* for tests and logs */
    struct cuda_profile *profile; /* BURNC_CUDA_PROFILE=1 (profile.c); NULL when off */
} cuda_device;

static inline cuda_device *cuda_dev(rt_device *dev) { return (cuda_device *)dev->impl; }

/* Makes the device's context current on the calling thread; BURNC_ERR_DEVICE_LOST after a
 * sticky error. `what` names the operation in the message. */
burnc_status_t cuda_enter(rt_device *dev, const char *what);
/* Checks a CUresult of an operation on dev: on failure sets the last error (and marks the
 * device lost for a sticky error). */
burnc_status_t cuda_check(rt_device *dev, CUresult r, const char *what);
/* ---- Launches (profile.c) ------------------------------------------------------------------ */
typedef struct cuda_profile cuda_profile;
/* BURNC_CUDA_PROFILE=1 at open: launches timed one by one, a table printed at close. */
void cuda_profile_init(rt_device *dev);
void cuda_profile_report(rt_device *dev);
/* Every kernel launch (the lock held): cuLaunchKernel on the device's stream, `what` naming it in
 * an error, `name` in the profile. With cd->pdl, cuLaunchKernelEx with programmatic stream
 * serialization: every entry burnc generates for sm >= 90 starts with griddepcontrol.wait
 * (cg_ptx_grid_dependency), so the launch is processed while the kernel before it drains and
 * its blocks start their work once that one has finished. Kernels from elsewhere never go
 * through here. */
burnc_status_t cuda_launch_fn(rt_device *dev, CUfunction fn, const uint32_t grid[3], const uint32_t block[3],
                              uint32_t shared, void **params, void **extra, const char *what, const char *name);
/* Puts burnc_device_timer_start's event on the stream if it waits for the first launch (the
 * lock held): the timer then leaves out the host's time between the start and that launch. */
burnc_status_t cuda_timer_first_launch(rt_device *dev);

/* Waits for everything enqueued so far (the lock held by the caller). */
burnc_status_t cuda_wait_locked(rt_device *dev, const char *what);

/* ---- Kernels (kernels.c) ------------------------------------------------------------------ */
typedef enum cuda_kernel_kind { CUDA_KERNEL_RECORD, CUDA_KERNEL_COMPILED } cuda_kernel_kind;

typedef struct cuda_entry {
    char name[33]; /* cg_ptx_launch.entry, terminated */
    CUfunction fn;
    uint32_t shared_set; /* the dynamic shared memory limit it was raised to (0: the default) */
} cuda_entry;

struct rt_kernel {
    rt_ktable_node node;   /* first: the memory cache's chain; its key is the kir_hash */
    cuda_kernel_kind kind;
    /* CUDA_KERNEL_COMPILED: */
    cg_ptx_options opt;    /* what it was generated with */
    kir_kernel ir;         /* a copy: equality on lookup, and what the planner needs */
    CUmodule module;
    int n_entries;
    cuda_entry entries[CG_PTX_MAX_LAUNCHES];
};

void cuda_kernel_cache_init(rt_device *dev);
void cuda_kernel_cache_free(rt_device *dev);
/* The compiled kernel for structure k (kir_hash key) and options opt: memory, then the disk
 * cache (the cubin, else the PTX), then the LLVM module. Makes the context current only to
 * build one. */
burnc_status_t cuda_kernel_get(rt_device *dev, const kir_kernel *k, uint64_t key, const cg_ptx_options *opt,
                               rt_kernel **out);
/* Plans and enqueues one launch of k over args whose buffers are ins/outs. */
burnc_status_t cuda_kernel_run(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                               rt_buffer *const *outs);
/* Loads PTX text into a module: through the linker, giving the cubin too (malloc'ed, may be
 * NULL), or (cubin NULL) with cuModuleLoadDataEx. BURNC_ERR_COMPILE with the driver's log when
 * the driver rejects it. Public for tests (a broken module). */
burnc_status_t cuda_module_from_ptx(rt_device *dev, const char *ptx, CUmodule *out, void **cubin, size_t *cubin_size);
/* Test hook: loads PTX text on dev (through the linker when link) and unloads it. */
burnc_status_t cuda_test_load_ptx(rt_device *dev, const char *ptx, bool link);
/* Test hook: launches a kernel that stores to an illegal address, then syncs: the sticky
 * error every later call reports as BURNC_ERR_DEVICE_LOST. */
burnc_status_t cuda_test_illegal_address(rt_device *dev);
/* Test hook: every launch uses autotune candidate c of the kernel's family (-1: autotune
 * decides); false when c is not a candidate. */
bool cuda_test_force_candidate(rt_device *dev, int c);
/* Submits the launches waiting in the batch (graphs on), the lock held by the caller. */
burnc_status_t cuda_batch_submit_locked(rt_device *dev);
void cuda_graphs_free(rt_device *dev);

/* ---- Autotune (tune.c) -------------------------------------------------------------------- */
struct at_outcome;
/* The options for launching k (structure hash key) over args: autotune's decision among the
 * cuda.elementwise / cuda.reduce candidates, tuned now on private buffers when may_tune and
 * BURNC_AUTOTUNE=on. how may be NULL. */
burnc_status_t cuda_tune_choose(rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *args,
                                bool may_tune, cg_ptx_options *out, struct at_outcome *how);
const char *cuda_tune_fingerprint(rt_device *dev);
burnc_status_t cuda_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, struct at_outcome *out);

#endif
