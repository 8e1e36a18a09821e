/* Private to runtime/vulkan: the loader opened with dlopen, the device, its buffers, the
 * batches of recorded dispatches and the compiled kernels.
 *
 * Execution model: launches are recorded into the command buffer of the current batch (a
 * barrier after each dispatch keeps them in stream order); a batch is submitted when it holds
 * BURNC_VULKAN_MAX_TASKS dispatches or when the host needs results (read, write, opaque record,
 * sync), and a fence tells when it is done. Host transfers wait for every submitted batch, so
 * the host never touches memory the device may still use.
 * Files: loader.c (dlopen, instance, device choice), backend.c (device, buffers, batches),
 * kernels.c (pipelines, launches, matmul, opaque records), tune.c (autotune). */
#ifndef BURNC_VK_H
#define BURNC_VK_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "codegen/glsl.h"
#include "codegen/kcache.h"
#include "rt.h"

/* ---- The loader (loader.c) ---------------------------------------------------------------- */
#define VK_GLOBAL_FNS(X) X(vkCreateInstance) X(vkEnumerateInstanceVersion)
#define VK_INSTANCE_FNS(X)                                                                          \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)            \
    X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceQueueFamilyProperties)                   \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)               \
    X(vkGetPhysicalDeviceProperties2)
#define VK_DEVICE_FNS(X)                                                                            \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)                    \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory)     \
    X(vkMapMemory) X(vkUnmapMemory) X(vkCreateCommandPool) X(vkDestroyCommandPool)                 \
    X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers) X(vkBeginCommandBuffer)                    \
    X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkQueueSubmit) X(vkQueueWaitIdle)              \
    X(vkDeviceWaitIdle) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)    \
    X(vkCmdCopyBuffer) X(vkCmdPipelineBarrier) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets)    \
    X(vkCmdDispatch) X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateComputePipelines) \
    X(vkDestroyPipeline) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)                      \
    X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreateDescriptorPool)       \
    X(vkDestroyDescriptorPool) X(vkResetDescriptorPool) X(vkAllocateDescriptorSets)                \
    X(vkUpdateDescriptorSets) X(vkCreatePipelineCache) X(vkDestroyPipelineCache)                   \
    X(vkGetPipelineCacheData) X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkCmdResetQueryPool)   \
    X(vkCmdWriteTimestamp) X(vkGetQueryPoolResults) X(vkCmdFillBuffer)

typedef struct vk_api {
#define VK_FN_MEMBER(name) PFN_##name name;
    VK_GLOBAL_FNS(VK_FN_MEMBER) VK_INSTANCE_FNS(VK_FN_MEMBER) VK_DEVICE_FNS(VK_FN_MEMBER)
#undef VK_FN_MEMBER
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    VkInstance instance;
    int n_phys;
    VkPhysicalDevice phys[16];
} vk_api;

/* The process's loader and instance, made on first use; NULL with the reason in why (no loader,
 * no instance). The instance lives until the process ends. */
const vk_api *vk_load(char *why, size_t cap);
/* Loads the device-level functions of dev into api (a copy the device owns). */
void vk_load_device(vk_api *api, VkDevice dev);

/* Physical device `spec` selects (the device's normalized spec, see runtime/device.c):
 * "vulkan" (BURNC_VULKAN_DEVICE when set, else the first GPU, else the first device),
 * "vulkan:N", "vulkan:discrete[:N]", "vulkan:cpu[:N]". -1 with the reason. */
int vk_select(const vk_api *api, const char *spec, char *why, size_t cap);
const char *vk_type_name(VkPhysicalDeviceType t);

/* ---- Buffers (backend.c) ------------------------------------------------------------------ */
typedef struct vk_buffer {
    rt_buffer base;      /* first: the runtime sees an rt_buffer */
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;           /* host address when the memory is host-visible and coherent */
    VkDeviceSize alloc;  /* bytes bound (at least 4, a multiple of 4) */
} vk_buffer;

static inline vk_buffer *vk_buf(rt_buffer *b) { return (vk_buffer *)b; }

/* ---- Kernels (kernels.c) ------------------------------------------------------------------ */
struct rt_kernel {
    bool record;          /* an opaque record, run on the host (matmul: on the device) */
    bool matmul;          /* a MATMUL record of a float dtype: the tiled shader */
    VkPipeline mm[BURNC_MAX_RANK + 1]; /* matmul pipelines by rank, made on first use */
    uint64_t key;         /* kir_hash */
    kir_kernel ir;        /* a copy, for equality and the launch layout */
    cg_glsl_options opt;
    int n_bindings;
    VkPipeline pipeline;
    struct rt_kernel *next;
};

/* ---- The device (backend.c) --------------------------------------------------------------- */
/* bindings: the argument words, the inputs, the outputs and the scratch records */
enum { VK_BATCHES = 3, VK_MAX_BINDINGS = 2 + KIR_MAX_INPUTS + KIR_MAX_OUTPUTS, VK_ARGS_PER_TASK = 1024 };
/* host transfers go through staging buffers of at most VK_STAGE_CHUNK bytes (backend.c) */
enum { VK_STAGE_MIN = 64 << 10, VK_STAGE_CHUNK = 32 << 20 };
/* Multi-pass reductions (codegen/glsl.h) run for fewer rows than VK_PASSES_ROWS of at least
 * VK_PASSES_LEAVES leaves: fewer rows than a GPU has compute units leave most idle with a
 * workgroup per row. Records are 16 bytes (an 8-byte value and a position). */
enum { VK_PASSES_ROWS = 264, VK_PASSES_LEAVES = 8, VK_RECORD_BYTES = 16 };

typedef struct vk_batch {
    VkCommandBuffer cmd;
    VkFence fence;
    VkDescriptorPool pool;
    vk_buffer *args; /* host-visible argument words of its tasks */
    size_t args_used;
    int tasks;
    bool recording, submitted;
} vk_batch;

typedef struct vk_device {
    vk_api api; /* with this device's functions */
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    VkDevice dev;
    VkQueue queue;
    uint32_t family;
    VkCommandPool cmd_pool;
    bool f64, i64, storage8, storage16;
    bool subgroups;    /* basic and shuffle_relative subgroup operations in compute shaders */
    int subgroup_size; /* for the log */
    bool denorm32, denorm64; /* float controls: denormals preserved in shaders */
    bool nan32, nan64;       /* float controls: signed zeros, infinities and NaNs preserved */
    bool fused32, fused64;   /* the device's own fma rounds once (probed at open) */
    int max_tasks;
    vk_batch batches[VK_BATCHES];
    int cur;
    long submits; /* batches submitted since open (for tests) */
    long pass_launches; /* launches run as multi-pass reductions (for tests) */
    /* layouts by binding count (kernels of the same signature share them) */
    VkDescriptorSetLayout set_layout[VK_MAX_BINDINGS + 1];
    VkPipelineLayout pipe_layout[VK_MAX_BINDINGS + 1];
    VkPipelineCache pipe_cache;
    char *pipe_cache_path;
    bool pipe_cache_loaded;
    mtx_t lock;  /* kernels list, disk cache, pipeline cache file */
    mtx_t qlock; /* batches: held (recursively) by every entry point that records, submits or
                    waits; reads and writes come from any thread, launches from the flush.
                    Order: qlock before lock. */
    struct rt_kernel *kernels;
    rt_buffer *scratch; /* multi-pass records, grown on demand (kernels.c) */
    kc_lazy disk;
    long pipelines;       /* pipelines created */
    long saved_pipelines; /* pipelines when the cache file was last written */
    char fingerprint[256];
    atomic_bool fuse;
    VkQueryPool timer; /* burnc_device_timer's two timestamps (made at the first start) */
    vk_buffer *stage[2]; /* staging for read-backs [0] and uploads [1] (backend.c) */
} vk_device;

static inline vk_device *vk_dev(rt_device *dev) { return (vk_device *)dev->impl; }

/* Wraps a VkResult into a status: out of memory for the memory errors, device lost, else
 * `code`, with the op and the result named. */
burnc_status_t vk_fail(VkResult r, burnc_status_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The current batch, begun if needed (waits for its fence when it is the oldest in flight). */
burnc_status_t vk_batch_get(vk_device *vd, vk_batch **out);
/* Ends a dispatch in the current batch: counts it, submits the batch when it is full. */
burnc_status_t vk_batch_task_done(vk_device *vd);
/* Submits the current batch (if it holds work) and waits for every submitted batch. */
burnc_status_t vk_drain(vk_device *vd);
/* Argument words for one task in the current batch: their buffer and offset. */
burnc_status_t vk_args_alloc(vk_device *vd, vk_batch *b, size_t bytes, VkDeviceSize *offset);

burnc_status_t vk_kernels_init(rt_device *dev);
/* Runs a small fma kernel to learn whether the device's fma rounds once (vd->fused32/64). */
void vk_probe_fma(rt_device *dev);
/* Writes the pipeline cache file (at close, and at a sync after new pipelines). */
void vk_save_pipeline_cache(vk_device *vd);
void vk_kernels_free(rt_device *dev);
burnc_status_t vk_compile(rt_device *dev, const ir_group *g, rt_kernel **out);
burnc_status_t vk_launch(rt_device *dev, rt_kernel *k, const ir_group *g, rt_buffer *const *const *bufs);
void vk_kernel_free(rt_device *dev, rt_kernel *k);
/* k's structure compiled with other code parameters (k itself when they are k's). */
burnc_status_t vk_kernel_variant(rt_device *dev, rt_kernel *k, cg_glsl_options opt, rt_kernel **out);
/* v itself, or for a row kernel whose rows have fewer leaves than v's workgroup has warps, the
 * variant of a warp per leaf (rounded up to a power of two): what a launch of args runs. */
burnc_status_t vk_fit_rows(rt_device *dev, rt_kernel *v, const kir_args *args, rt_kernel **out);
/* Records one dispatch of exactly this compiled kernel. */
burnc_status_t vk_launch_with(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                              rt_buffer *const *outs);
/* The variant autotune picks for this launch (tune.c); tunes now under BURNC_AUTOTUNE=on. */
burnc_status_t vk_tune_choose(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                              rt_buffer *const *outs, rt_kernel **out);
/* burnc-tune --file: k tuned for the layout of args on private buffers (rt_backend.tune_kernel). */
burnc_status_t vk_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, struct at_outcome *out);
burnc_status_t vk_compile_kernel(rt_device *dev, const kir_kernel *k, uint64_t key, rt_kernel **out);
burnc_status_t vk_launch_kernel(rt_device *dev, rt_kernel *k, const kir_args *args, rt_buffer *const *ins,
                                rt_buffer *const *outs, bool epilogue);

/* Test hooks: shaders compiled by glslang and pipelines created in this process, batches
 * submitted by dev, and whether dev found a pipeline cache file at open. */
typedef struct vk_stats {
    long glslang_compiles, pipelines, submits, pass_launches;
    bool pipeline_cache_loaded;
} vk_stats;
void rt_vulkan_stats(burnc_device_t *dev, vk_stats *out);
/* Devices opened after this call act as if they had no 8- and 16-bit storage and no subgroup
 * operations (for tests of the fallbacks: 32-bit words, lane trees in shared memory). */
void rt_vulkan_force_fallbacks(bool on);
/* Compiles GLSL text the way kernels are compiled (for tests of compile errors). */
burnc_status_t rt_vulkan_compile_glsl(const char *src);

#endif
