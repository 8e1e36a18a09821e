/* The vulkan device: physical devices by spec, device-local buffers (the runtime pools them),
 * host transfers through mapped or staging memory, dispatches batched into command buffers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc_config.h"
#include "kcache.h"
#include "vk.h"

enum { DEFAULT_MAX_TASKS = 32 };

burnc_status_t vk_fail(VkResult r, burnc_status_t code, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
        code = BURNC_ERR_OUT_OF_MEMORY;
    else if (r == VK_ERROR_DEVICE_LOST)
        code = BURNC_ERR_DEVICE_LOST;
    return rt_fail(code, "vulkan: %s: VkResult %d", what, (int)r);
}

/* ---- Listing ---- */

static int vk_enumerate(burnc_device_info_t *out, int cap)
{
    char why[256];
    const vk_api *a = vk_load(why, sizeof why);
    if (!a)
        return 0;
    /* GPUs first: the default device is the first listed that is not a CPU (DESIGN.md) */
    int n = 0, n_cpu = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < a->n_phys; i++) {
            VkPhysicalDeviceProperties p;
            a->vkGetPhysicalDeviceProperties(a->phys[i], &p);
            bool cpu = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
            if (cpu != (pass == 1))
                continue;
            if (out && n < cap) {
                out[n] = (burnc_device_info_t){.type = BURNC_DEVICE_VULKAN};
                if (cpu)
                    snprintf(out[n].spec, sizeof out[n].spec, n_cpu ? "vulkan:cpu:%d" : "vulkan:cpu", n_cpu);
                else
                    snprintf(out[n].spec, sizeof out[n].spec, "vulkan:%d", i);
                snprintf(out[n].name, sizeof out[n].name, "%.100s (%s)", p.deviceName, vk_type_name(p.deviceType));
            }
            n_cpu += cpu;
            n++;
        }
    return n;
}

/* ---- Batches ---- */

static burnc_status_t batch_retire(vk_device *vd, vk_batch *b)
{
    if (!b->submitted)
        return BURNC_OK;
    VkResult r = vd->api.vkWaitForFences(vd->dev, 1, &b->fence, VK_TRUE, UINT64_MAX);
    b->submitted = false;
    vd->api.vkResetFences(vd->dev, 1, &b->fence);
    vd->api.vkResetDescriptorPool(vd->dev, b->pool, 0);
    b->args_used = 0;
    b->tasks = 0;
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_EXECUTION, "waiting for a batch of %s", vd->props.deviceName);
    return BURNC_OK;
}

/* Makes earlier dispatches and copies visible to later ones (in this and later batches). */
static void full_barrier(vk_device *vd, VkCommandBuffer cmd)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vd->api.vkCmdPipelineBarrier(cmd, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

burnc_status_t vk_batch_get(vk_device *vd, vk_batch **out)
{
    vk_batch *b = &vd->batches[vd->cur];
    if (!b->recording) {
        RT_TRY(batch_retire(vd, b));
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                       .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        vd->api.vkResetCommandBuffer(b->cmd, 0);
        VkResult r = vd->api.vkBeginCommandBuffer(b->cmd, &bi);
        if (r != VK_SUCCESS)
            return vk_fail(r, BURNC_ERR_EXECUTION, "vkBeginCommandBuffer");
        full_barrier(vd, b->cmd);
        b->recording = true;
    }
    *out = b;
    return BURNC_OK;
}

static burnc_status_t batch_submit(vk_device *vd)
{
    vk_batch *b = &vd->batches[vd->cur];
    if (!b->recording)
        return BURNC_OK;
    b->recording = false;
    VkResult r = vd->api.vkEndCommandBuffer(b->cmd);
    if (r == VK_SUCCESS) {
        VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &b->cmd};
        r = vd->api.vkQueueSubmit(vd->queue, 1, &si, b->fence);
    }
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_EXECUTION, "submitting %d dispatches", b->tasks);
    b->submitted = true;
    vd->submits++;
    vd->cur = (vd->cur + 1) % VK_BATCHES;
    return BURNC_OK;
}

burnc_status_t vk_batch_task_done(vk_device *vd)
{
    vk_batch *b = &vd->batches[vd->cur];
    full_barrier(vd, b->cmd);
    if (++b->tasks >= vd->max_tasks)
        return batch_submit(vd);
    return BURNC_OK;
}

burnc_status_t vk_drain(vk_device *vd)
{
    burnc_status_t s = batch_submit(vd);
    for (int i = 0; i < VK_BATCHES; i++) {
        burnc_status_t si = batch_retire(vd, &vd->batches[i]);
        if (s == BURNC_OK)
            s = si;
    }
    return s;
}

burnc_status_t vk_args_alloc(vk_device *vd, vk_batch *b, size_t bytes, VkDeviceSize *offset)
{
    VkDeviceSize align = vd->props.limits.minStorageBufferOffsetAlignment;
    align = align < 16 ? 16 : align;
    size_t at = (b->args_used + align - 1) / align * align;
    if (at + bytes > b->args->alloc)
        return rt_fail(BURNC_ERR_INTERNAL, "vulkan: %zu argument bytes do not fit the batch", bytes);
    b->args_used = at + bytes;
    *offset = at;
    return BURNC_OK;
}

/* ---- Buffers ---- */

/* A memory type of `bits` with the wanted flags, else -1. */
static int memory_type(const vk_device *vd, uint32_t bits, VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < vd->mem.memoryTypeCount; i++)
        if ((bits >> i & 1) && (vd->mem.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

/* Device-local memory the host does not see, where there is some: a discrete GPU may also
 * offer device-local memory through its host window (resizable BAR), which the driver may
 * place or cache differently; tensors want the plain video memory. */
static int device_memory_type(const vk_device *vd, uint32_t bits)
{
    for (uint32_t i = 0; i < vd->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = vd->mem.memoryTypes[i].propertyFlags;
        if ((bits >> i & 1) && (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            return (int)i;
    }
    return memory_type(vd, bits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
}

static void buffer_destroy(vk_device *vd, vk_buffer *b)
{
    if (b->map)
        vd->api.vkUnmapMemory(vd->dev, b->mem);
    if (b->buf)
        vd->api.vkDestroyBuffer(vd->dev, b->buf, NULL);
    if (b->mem)
        vd->api.vkFreeMemory(vd->dev, b->mem, NULL);
    free(b);
}

/* host: memory the host maps (staging, arguments), cached for the host when `cached` (the
 * host reads it back) and write-combined where the device offers that otherwise; else
 * device-local, mapped too when the device's memory is the host's (CPU and integrated
 * devices). */
static burnc_status_t buffer_create_as(vk_device *vd, size_t size, bool host, bool cached, vk_buffer **out)
{
    vk_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    b->base.size = size;
    b->alloc = size < 4 ? 4 : (size + 3) / 4 * 4;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = b->alloc,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vd->api.vkCreateBuffer(vd->dev, &bi, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        buffer_destroy(vd, b);
        return vk_fail(r, BURNC_ERR_OUT_OF_MEMORY, "vkCreateBuffer of %zu bytes", size);
    }
    VkMemoryRequirements req;
    vd->api.vkGetBufferMemoryRequirements(vd->dev, b->buf, &req);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    bool shared = vd->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                  vd->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
    int type = -1;
    if (host && cached)
        type = memory_type(vd, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0 && (host || shared))
        type = memory_type(vd, req.memoryTypeBits, hv | (host ? 0 : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT));
    if (type < 0 && host)
        type = memory_type(vd, req.memoryTypeBits, hv);
    if (type < 0)
        type = device_memory_type(vd, req.memoryTypeBits);
    if (type < 0)
        type = memory_type(vd, req.memoryTypeBits, 0);
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                               .memoryTypeIndex = (uint32_t)type};
    r = vd->api.vkAllocateMemory(vd->dev, &ai, NULL, &b->mem);
    if (r == VK_SUCCESS)
        r = vd->api.vkBindBufferMemory(vd->dev, b->buf, b->mem, 0);
    if (r == VK_SUCCESS && (vd->mem.memoryTypes[type].propertyFlags & hv) == hv)
        r = vd->api.vkMapMemory(vd->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
    if (r != VK_SUCCESS) {
        buffer_destroy(vd, b);
        return vk_fail(r, BURNC_ERR_OUT_OF_MEMORY, "allocating %zu bytes on %s", size, vd->props.deviceName);
    }
    *out = b;
    return BURNC_OK;
}

static burnc_status_t buffer_create(vk_device *vd, size_t size, bool host, vk_buffer **out)
{
    return buffer_create_as(vd, size, host, false, out);
}

static burnc_status_t vk_alloc(rt_device *dev, size_t size, rt_buffer **out)
{
    vk_device *vd = vk_dev(dev);
    if (size > vd->props.limits.maxStorageBufferRange)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "vulkan: a buffer of %zu bytes is larger than %s binds (%u bytes)",
                       size, vd->props.deviceName, vd->props.limits.maxStorageBufferRange);
    vk_buffer *b;
    RT_TRY(buffer_create(vd, size, false, &b));
    *out = &b->base;
    return BURNC_OK;
}

/* Queued work may still use the buffer (the pool's cache being emptied): wait first. */
static void vk_free(rt_device *dev, rt_buffer *buf)
{
    if (!buf)
        return;
    vk_device *vd = vk_dev(dev);
    rt_error_state saved;
    rt_error_save(&saved);
    mtx_lock(&vd->qlock);
    vk_drain(vd);
    buffer_destroy(vd, vk_buf(buf));
    mtx_unlock(&vd->qlock);
    rt_error_restore(&saved);
}

/* The staging buffer of one direction (qlock held), kept between copies and grown up to
 * VK_STAGE_CHUNK bytes: a copy goes through it chunk by chunk. One staging buffer the size of
 * a whole tensor was measured to cost dearly on NVIDIA's driver: after a 1 GiB upload through a
 * host-cached buffer of that size, the device copied at half its speed and element-wise kernels
 * ran 2.7x slower for the rest of the process. Uploads use write-combined memory, read-backs
 * host-cached memory. */
static burnc_status_t stage_buffer(vk_device *vd, bool to_device, size_t n, vk_buffer **out)
{
    vk_buffer **st = &vd->stage[to_device];
    size_t want = n < VK_STAGE_CHUNK ? n : VK_STAGE_CHUNK;
    if (!*st || (*st)->base.size < want) {
        if (*st)
            buffer_destroy(vd, *st);
        *st = NULL;
        RT_TRY(buffer_create_as(vd, want < VK_STAGE_MIN ? VK_STAGE_MIN : want, true, !to_device, st));
    }
    *out = *st;
    return BURNC_OK;
}

/* Copies between a buffer and host memory through the staging buffer, a chunk at a time. */
static burnc_status_t staged_copy(vk_device *vd, vk_buffer *b, size_t offset, void *host, size_t n, bool to_device)
{
    vk_buffer *st;
    RT_TRY(stage_buffer(vd, to_device, n, &st));
    burnc_status_t s = BURNC_OK;
    for (size_t done = 0; done < n && s == BURNC_OK;) {
        size_t m = n - done < st->base.size ? n - done : st->base.size;
        if (to_device)
            memcpy(st->map, (char *)host + done, m);
        vk_batch *bt = NULL;
        s = vk_batch_get(vd, &bt);
        if (s == BURNC_OK) {
            VkBufferCopy c = {.srcOffset = to_device ? 0 : offset + done, .dstOffset = to_device ? offset + done : 0,
                              .size = m};
            vd->api.vkCmdCopyBuffer(bt->cmd, to_device ? st->buf : b->buf, to_device ? b->buf : st->buf, 1, &c);
            full_barrier(vd, bt->cmd);
            bt->tasks++;
            s = vk_drain(vd);
        }
        if (s == BURNC_OK && !to_device)
            memcpy((char *)host + done, st->map, m);
        done += m;
    }
    return s;
}

static burnc_status_t write_locked(rt_device *dev, rt_buffer *buf, size_t offset, const void *src, size_t n)
{
    vk_device *vd = vk_dev(dev);
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "write"));
    RT_TRY(vk_drain(vd));
    if (!n)
        return BURNC_OK;
    vk_buffer *b = vk_buf(buf);
    if (b->map) {
        memcpy((char *)b->map + offset, src, n);
        return BURNC_OK;
    }
    return staged_copy(vd, b, offset, (void *)src, n, true);
}

static burnc_status_t vk_write(rt_device *dev, rt_buffer *buf, size_t offset, const void *src, size_t n)
{
    vk_device *vd = vk_dev(dev);
    mtx_lock(&vd->qlock);
    burnc_status_t s = write_locked(dev, buf, offset, src, n);
    mtx_unlock(&vd->qlock);
    return s;
}

static burnc_status_t read_locked(rt_device *dev, rt_buffer *buf, size_t offset, void *dst, size_t n)
{
    vk_device *vd = vk_dev(dev);
    RT_TRY(rt_buffer_check(dev, buf, offset, n, "read"));
    RT_TRY(vk_drain(vd));
    if (!n)
        return BURNC_OK;
    vk_buffer *b = vk_buf(buf);
    if (b->map) {
        memcpy(dst, (const char *)b->map + offset, n);
        return BURNC_OK;
    }
    return staged_copy(vd, b, offset, dst, n, false);
}

static burnc_status_t vk_read(rt_device *dev, rt_buffer *buf, size_t offset, void *dst, size_t n)
{
    vk_device *vd = vk_dev(dev);
    mtx_lock(&vd->qlock);
    burnc_status_t s = read_locked(dev, buf, offset, dst, n);
    mtx_unlock(&vd->qlock);
    return s;
}

/* A program that never releases its last tensor never closes the device: new pipelines reach
 * the cache file at a sync as well. */
static burnc_status_t vk_sync(rt_device *dev)
{
    vk_device *vd = vk_dev(dev);
    mtx_lock(&vd->qlock);
    burnc_status_t s = vk_drain(vd);
    mtx_unlock(&vd->qlock);
    mtx_lock(&vd->lock);
    if (vd->pipelines != vd->saved_pipelines)
        vk_save_pipeline_cache(vd);
    mtx_unlock(&vd->lock);
    return s;
}

/* ---- Opening ---- */

static void vk_close(rt_device *dev)
{
    vk_device *vd = vk_dev(dev);
    if (!vd)
        return;
    if (vd->dev) {
        vd->api.vkDeviceWaitIdle(vd->dev);
        vk_kernels_free(dev);
        for (int i = 0; i < VK_BATCHES; i++) {
            vk_batch *b = &vd->batches[i];
            if (b->fence)
                vd->api.vkDestroyFence(vd->dev, b->fence, NULL);
            if (b->pool)
                vd->api.vkDestroyDescriptorPool(vd->dev, b->pool, NULL);
            if (b->args)
                buffer_destroy(vd, b->args);
        }
        if (vd->cmd_pool)
            vd->api.vkDestroyCommandPool(vd->dev, vd->cmd_pool, NULL);
        if (vd->timer)
            vd->api.vkDestroyQueryPool(vd->dev, vd->timer, NULL);
        for (int i = 0; i < 2; i++)
            if (vd->stage[i])
                buffer_destroy(vd, vd->stage[i]);
        vd->api.vkDestroyDevice(vd->dev, NULL);
    }
    mtx_destroy(&vd->lock);
    mtx_destroy(&vd->qlock);
    free(vd);
    dev->impl = NULL;
}

static atomic_bool force_fallbacks; /* rt_vulkan_force_fallbacks (tests) */

void rt_vulkan_force_fallbacks(bool on) { atomic_store(&force_fallbacks, on); }

static int max_tasks_default(void)
{
    const char *env = getenv("BURNC_VULKAN_MAX_TASKS");
    long n = env && *env ? strtol(env, NULL, 10) : 0;
    return n >= 1 && n <= 4096 ? (int)n : DEFAULT_MAX_TASKS;
}

static burnc_status_t create_device(rt_device *dev, vk_device *vd)
{
    VkPhysicalDeviceShaderFloat16Int8Features f16i8 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice8BitStorageFeatures s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
                                              .pNext = &f16i8};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                .pNext = &s8};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    bool v12 = vd->props.apiVersion >= VK_API_VERSION_1_2;
    if (!v12)
        s16.pNext = NULL; /* the 8-bit and int8 structs are Vulkan 1.2 */
    vd->api.vkGetPhysicalDeviceFeatures2(vd->phys, &f2);
    if (!f2.features.shaderInt64)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s has no 64-bit integers in shaders "
                       "(shaderInt64), which burnc's kernels index with", dev->spec, vd->props.deviceName);
    vd->i64 = true;
    vd->f64 = f2.features.shaderFloat64;
    vd->storage16 = s16.storageBuffer16BitAccess && f2.features.shaderInt16 && !atomic_load(&force_fallbacks);
    vd->storage8 = v12 && s8.storageBuffer8BitAccess && f16i8.shaderInt8 && !atomic_load(&force_fallbacks);
    if (vd->props.apiVersion >= VK_API_VERSION_1_1 && !atomic_load(&force_fallbacks)) {
        VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
        vd->api.vkGetPhysicalDeviceProperties2(vd->phys, &p2);
        const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT;
        const char *env = getenv("BURNC_VULKAN_SUBGROUPS"); /* "0": shared memory only */
        vd->subgroups = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sg.supportedOperations & need) == need &&
                        sg.subgroupSize >= 1 && (sg.subgroupSize & (sg.subgroupSize - 1)) == 0 &&
                        !(env && strcmp(env, "0") == 0);
        vd->subgroup_size = (int)sg.subgroupSize;
    }
    if (v12) {
        VkPhysicalDeviceFloatControlsProperties fc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &fc};
        vd->api.vkGetPhysicalDeviceProperties2(vd->phys, &p2);
        vd->denorm32 = fc.shaderDenormPreserveFloat32;
        vd->denorm64 = fc.shaderDenormPreserveFloat64 && vd->f64;
        vd->nan32 = fc.shaderSignedZeroInfNanPreserveFloat32;
        vd->nan64 = fc.shaderSignedZeroInfNanPreserveFloat64 && vd->f64;
    }
    /* enable exactly what is used */
    VkPhysicalDeviceFeatures2 en = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    en.features.shaderInt64 = VK_TRUE;
    en.features.shaderFloat64 = vd->f64;
    en.features.shaderInt16 = vd->storage16;
    VkPhysicalDeviceShaderFloat16Int8Features en_i8 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .shaderInt8 = vd->storage8};
    VkPhysicalDevice8BitStorageFeatures en_s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
                                                 .storageBuffer8BitAccess = vd->storage8, .pNext = &en_i8};
    VkPhysicalDevice16BitStorageFeatures en_s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                   .storageBuffer16BitAccess = vd->storage16,
                                                   .pNext = v12 ? &en_s8 : NULL};
    en.pNext = &en_s16;

    VkQueueFamilyProperties fams[16];
    uint32_t nf = 16;
    vd->api.vkGetPhysicalDeviceQueueFamilyProperties(vd->phys, &nf, fams);
    vd->family = UINT32_MAX;
    for (uint32_t i = 0; i < nf && vd->family == UINT32_MAX; i++)
        if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            vd->family = i;
    if (vd->family == UINT32_MAX)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s has no compute queue", dev->spec,
                       vd->props.deviceName);
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = vd->family,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &en, .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi};
    VkResult r = vd->api.vkCreateDevice(vd->phys, &di, NULL, &vd->dev);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: vkCreateDevice on %s", dev->spec,
                       vd->props.deviceName);
    vk_load_device(&vd->api, vd->dev);
    vd->api.vkGetDeviceQueue(vd->dev, vd->family, 0, &vd->queue);
    return BURNC_OK;
}

static burnc_status_t create_batches(vk_device *vd)
{
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = vd->family};
    VkResult r = vd->api.vkCreateCommandPool(vd->dev, &pi, NULL, &vd->cmd_pool);
    if (r != VK_SUCCESS)
        return vk_fail(r, BURNC_ERR_UNAVAILABLE, "vkCreateCommandPool");
    for (int i = 0; i < VK_BATCHES; i++) {
        vk_batch *b = &vd->batches[i];
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = vd->cmd_pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, (uint32_t)(vd->max_tasks * VK_MAX_BINDINGS)};
        VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                          .maxSets = (uint32_t)vd->max_tasks, .poolSizeCount = 1, .pPoolSizes = &ps};
        if ((r = vd->api.vkAllocateCommandBuffers(vd->dev, &ai, &b->cmd)) != VK_SUCCESS ||
            (r = vd->api.vkCreateFence(vd->dev, &fi, NULL, &b->fence)) != VK_SUCCESS ||
            (r = vd->api.vkCreateDescriptorPool(vd->dev, &dpi, NULL, &b->pool)) != VK_SUCCESS)
            return vk_fail(r, BURNC_ERR_UNAVAILABLE, "creating command buffers");
        RT_TRY(buffer_create(vd, (size_t)vd->max_tasks * VK_ARGS_PER_TASK, true, &b->args));
    }
    return BURNC_OK;
}

static void make_fingerprint(vk_device *vd)
{
    char uuid[2 * VK_UUID_SIZE + 1];
    for (unsigned i = 0; i < VK_UUID_SIZE; i++)
        snprintf(uuid + 2 * i, 3, "%02x", vd->props.pipelineCacheUUID[i]);
    snprintf(vd->fingerprint, sizeof vd->fingerprint, "vulkan/%.120s/%04x:%04x/driver %u/api %u.%u/%s/%s",
             vd->props.deviceName, vd->props.vendorID, vd->props.deviceID, vd->props.driverVersion,
             VK_API_VERSION_MAJOR(vd->props.apiVersion), VK_API_VERSION_MINOR(vd->props.apiVersion), uuid,
             BURNC_VERSION);
}

static burnc_status_t vk_open(rt_device *dev, int index)
{
    (void)index; /* the spec says which device (vk_select) */
    char why[384];
    const vk_api *a = vk_load(why, sizeof why);
    if (!a)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s", dev->spec, why);
    int i = vk_select(a, dev->spec, why, sizeof why);
    if (i < 0)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s", why);
    vk_device *vd = calloc(1, sizeof *vd);
    if (!vd)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: %s: out of memory", dev->spec);
    dev->impl = vd;
    vd->api = *a;
    vd->phys = a->phys[i];
    vd->max_tasks = max_tasks_default();
    mtx_init(&vd->lock, mtx_plain);
    mtx_init(&vd->qlock, mtx_recursive);
    atomic_init(&vd->fuse, rt_fusion_default());
    a->vkGetPhysicalDeviceProperties(vd->phys, &vd->props);
    a->vkGetPhysicalDeviceMemoryProperties(vd->phys, &vd->mem);
    make_fingerprint(vd);
    burnc_status_t s = create_device(dev, vd);
    if (s == BURNC_OK)
        s = create_batches(vd);
    if (s == BURNC_OK)
        s = vk_kernels_init(dev);
    if (s == BURNC_OK)
        vk_probe_fma(dev);
    if (s != BURNC_OK) {
        rt_error_state saved;
        rt_error_save(&saved);
        vk_close(dev);
        rt_error_restore(&saved);
        return s;
    }
    snprintf(dev->name, sizeof dev->name, "%.100s (Vulkan %s)", vd->props.deviceName, vk_type_name(vd->props.deviceType));
    rt_log("runtime", "%s: %s, f64 %s, 8-bit %s, 16-bit %s, subgroup shuffles %s (size %d), f32 denormals %s, "
           "f32 NaNs %s, %d dispatches per submit", dev->spec,
           dev->name, vd->f64 ? "yes" : "no", vd->storage8 ? "yes" : "through words",
           vd->storage16 ? "yes" : "through words", vd->subgroups ? "yes" : "no", vd->subgroup_size,
           vd->denorm32 ? "preserved" : "may flush to zero", vd->nan32 ? "preserved" : "not promised", vd->max_tasks);
    return BURNC_OK;
}

/* f32 arithmetic (bf16 computes in f32; f16's denormals are normal f32 numbers) and f64 */
static bool vk_flushes_denormals(rt_device *dev, burnc_dtype_t dt)
{
    const vk_device *vd = vk_dev(dev);
    if (dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_BF16)
        return !vd->denorm32;
    return dt == BURNC_DTYPE_F64 && !vd->denorm64;
}

static bool vk_supports_dtype(rt_device *dev, burnc_dtype_t dt)
{
    vk_device *vd = vk_dev(dev);
    switch (dt) {
    case BURNC_DTYPE_F32:
    case BURNC_DTYPE_I32:
    case BURNC_DTYPE_I64: return true;
    case BURNC_DTYPE_F64: return vd->f64;
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16:
    case BURNC_DTYPE_U8:
    case BURNC_DTYPE_BOOL: return true; /* without 8/16-bit storage, through 32-bit words */
    default: return false;
    }
}

static void vk_fingerprint(rt_device *dev, char *out, size_t cap)
{
    if (cap)
        snprintf(out, cap, "%s", vk_dev(dev)->fingerprint);
}

static const char *vk_autotune_fingerprint(rt_device *dev) { return vk_dev(dev)->fingerprint; }

static bool vk_fusion_enabled(rt_device *dev) { return atomic_load(&vk_dev(dev)->fuse); }
static void vk_set_fusion(rt_device *dev, bool enabled) { atomic_store(&vk_dev(dev)->fuse, enabled); }

/* vkCmdCopyBuffer between two private buffers, timed with device timestamps. */
static burnc_status_t copy_time_locked(rt_device *dev, size_t bytes, int reps, double *seconds)
{
    vk_device *vd = vk_dev(dev);
    RT_TRY(vk_drain(vd));
    vk_buffer *src = NULL, *dst = NULL;
    VkQueryPool qp = VK_NULL_HANDLE;
    double *t = calloc((size_t)reps, sizeof *t);
    burnc_status_t s = t ? BURNC_OK : rt_fail(BURNC_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    if (s == BURNC_OK)
        s = buffer_create(vd, bytes, false, &src);
    if (s == BURNC_OK)
        s = buffer_create(vd, bytes, false, &dst);
    if (s == BURNC_OK) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2};
        VkResult r = vd->api.vkCreateQueryPool(vd->dev, &qi, NULL, &qp);
        if (r != VK_SUCCESS)
            s = vk_fail(r, BURNC_ERR_EXECUTION, "vkCreateQueryPool");
    }
    if (s == BURNC_OK) {
        /* defined contents, and a warm-up copy: the first touch of fresh memory (page tables,
         * caches) is not the bandwidth being measured */
        vk_batch *b;
        s = vk_batch_get(vd, &b);
        if (s == BURNC_OK) {
            VkBufferCopy c = {.size = bytes};
            vd->api.vkCmdFillBuffer(b->cmd, src->buf, 0, VK_WHOLE_SIZE, 0x3c3c3c3cu);
            full_barrier(vd, b->cmd);
            vd->api.vkCmdCopyBuffer(b->cmd, src->buf, dst->buf, 1, &c);
            b->tasks++;
            s = vk_drain(vd);
        }
    }
    for (int i = 0; i < reps && s == BURNC_OK; i++) {
        vk_batch *b;
        s = vk_batch_get(vd, &b);
        if (s != BURNC_OK)
            break;
        VkBufferCopy c = {.size = bytes};
        vd->api.vkCmdResetQueryPool(b->cmd, qp, 0, 2);
        vd->api.vkCmdWriteTimestamp(b->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 0);
        vd->api.vkCmdCopyBuffer(b->cmd, src->buf, dst->buf, 1, &c);
        vd->api.vkCmdWriteTimestamp(b->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 1);
        b->tasks++;
        s = vk_drain(vd);
        uint64_t ts[2];
        VkResult r = s == BURNC_OK ? vd->api.vkGetQueryPoolResults(vd->dev, qp, 0, 2, sizeof ts, ts, sizeof ts[0],
                                                                  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT)
                                   : VK_SUCCESS;
        if (r != VK_SUCCESS)
            s = vk_fail(r, BURNC_ERR_EXECUTION, "vkGetQueryPoolResults");
        t[i] = (double)(ts[1] - ts[0]) * vd->props.limits.timestampPeriod * 1e-9;
    }
    if (s == BURNC_OK) {
        for (int i = 1; i < reps; i++) /* insertion sort: reps is small */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        *seconds = t[reps / 2];
    }
    if (qp)
        vd->api.vkDestroyQueryPool(vd->dev, qp, NULL);
    if (src)
        buffer_destroy(vd, src);
    if (dst)
        buffer_destroy(vd, dst);
    free(t);
    return s;
}

/* A timestamp in the current batch once the commands before it are done; at a stop, the batches
 * are submitted and waited for, and the seconds between the two timestamps given. */
static burnc_status_t vk_timer_mark(rt_device *dev, bool stop, double *seconds)
{
    vk_device *vd = vk_dev(dev);
    burnc_status_t s = BURNC_OK;
    mtx_lock(&vd->qlock);
    if (!vd->timer) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2};
        VkResult r = vd->api.vkCreateQueryPool(vd->dev, &qi, NULL, &vd->timer);
        if (r != VK_SUCCESS)
            s = vk_fail(r, BURNC_ERR_EXECUTION, "burnc_device_timer: vkCreateQueryPool");
    }
    vk_batch *b;
    if (s == BURNC_OK)
        s = vk_batch_get(vd, &b);
    if (s == BURNC_OK) {
        if (!stop)
            vd->api.vkCmdResetQueryPool(b->cmd, vd->timer, 0, 2);
        vd->api.vkCmdWriteTimestamp(b->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, vd->timer, stop);
    }
    if (s == BURNC_OK && stop)
        s = vk_drain(vd);
    uint64_t ts[2];
    if (s == BURNC_OK && stop) {
        VkResult r = vd->api.vkGetQueryPoolResults(vd->dev, vd->timer, 0, 2, sizeof ts, ts, sizeof ts[0],
                                                   VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (r != VK_SUCCESS)
            s = vk_fail(r, BURNC_ERR_EXECUTION, "burnc_device_timer_stop: vkGetQueryPoolResults");
        else
            *seconds = (double)(ts[1] - ts[0]) * vd->props.limits.timestampPeriod * 1e-9;
    }
    mtx_unlock(&vd->qlock);
    return s;
}

static burnc_status_t vk_copy_time(rt_device *dev, size_t bytes, int reps, double *seconds)
{
    vk_device *vd = vk_dev(dev);
    mtx_lock(&vd->qlock);
    burnc_status_t s = copy_time_locked(dev, bytes, reps, seconds);
    mtx_unlock(&vd->qlock);
    return s;
}

void rt_vulkan_stats(burnc_device_t *dev, vk_stats *out)
{
    *out = (vk_stats){.glslang_compiles = cg_glsl_compile_count()};
    if (!dev || dev->be != &rt_vulkan_backend)
        return;
    vk_device *vd = vk_dev(dev);
    out->pipelines = vd->pipelines;
    out->submits = vd->submits;
    out->pass_launches = vd->pass_launches;
    out->pipeline_cache_loaded = vd->pipe_cache_loaded;
}

const rt_backend rt_vulkan_backend = {
    .kind = "vulkan",
    .type = BURNC_DEVICE_VULKAN,
    .queued = true,
    .enumerate = vk_enumerate,
    .open = vk_open,
    .close = vk_close,
    .supports_dtype = vk_supports_dtype,
    .flushes_denormals = vk_flushes_denormals,
    .alloc = vk_alloc,
    .free = vk_free,
    .write = vk_write,
    .read = vk_read,
    .compile = vk_compile,
    .launch = vk_launch,
    .kernel_free = vk_kernel_free,
    .sync = vk_sync,
    .fingerprint = vk_fingerprint,
    .compile_kernel = vk_compile_kernel,
    .launch_kernel = vk_launch_kernel,
    .fusion_enabled = vk_fusion_enabled,
    .set_fusion = vk_set_fusion,
    .autotune_fingerprint = vk_autotune_fingerprint,
    .copy_time = vk_copy_time,
    .timer_mark = vk_timer_mark,
    .tune_kernel = vk_tune_kernel,
};
