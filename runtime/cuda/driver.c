/* The CUDA driver: libcuda.so.1 opened with dlopen (never linked: a program linked to the
 * stub library cannot start without a driver), its entry points, and CUresult -> status. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cu.h"

static struct {
    once_flag once;
    cuda_driver api;
    bool ok;
    char why[400];
} drv = {.once = ONCE_FLAG_INIT};

/* Each entry by the versioned name cuda.h maps its plain name to. */
#define SYMBOLS(X)                                           \
    X(Init, "cuInit")                                        \
    X(DriverGetVersion, "cuDriverGetVersion")                \
    X(DeviceGetCount, "cuDeviceGetCount")                    \
    X(DeviceGet, "cuDeviceGet")                              \
    X(DeviceGetName, "cuDeviceGetName")                      \
    X(DeviceGetAttribute, "cuDeviceGetAttribute")            \
    X(DeviceTotalMem, "cuDeviceTotalMem_v2")                 \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")    \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") \
    X(DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2")   \
    X(CtxSetCurrent, "cuCtxSetCurrent")                      \
    X(StreamCreate, "cuStreamCreate")                        \
    X(StreamDestroy, "cuStreamDestroy_v2")                   \
    X(StreamSynchronize, "cuStreamSynchronize")              \
    X(EventCreate, "cuEventCreate")                          \
    X(EventDestroy, "cuEventDestroy_v2")                     \
    X(EventRecord, "cuEventRecord")                          \
    X(EventSynchronize, "cuEventSynchronize")                \
    X(EventElapsedTime, "cuEventElapsedTime_v2")             \
    X(MemAlloc, "cuMemAlloc_v2")                             \
    X(MemFree, "cuMemFree_v2")                               \
    X(MemHostAlloc, "cuMemHostAlloc")                        \
    X(MemFreeHost, "cuMemFreeHost")                          \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")               \
    X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")               \
    X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")               \
    X(MemsetD8Async, "cuMemsetD8Async")                      \
    X(ModuleLoadData, "cuModuleLoadData")                    \
    X(ModuleLoadDataEx, "cuModuleLoadDataEx")                \
    X(ModuleUnload, "cuModuleUnload")                        \
    X(ModuleGetFunction, "cuModuleGetFunction")              \
    X(FuncSetAttribute, "cuFuncSetAttribute")                \
    X(LaunchKernel, "cuLaunchKernel")                        \
    X(LaunchKernelEx, "cuLaunchKernelEx")                    \
    X(LinkCreate, "cuLinkCreate_v2")                         \
    X(LinkAddData, "cuLinkAddData_v2")                       \
    X(LinkComplete, "cuLinkComplete")                        \
    X(LinkDestroy, "cuLinkDestroy")                          \
    X(GetErrorName, "cuGetErrorName")                        \
    X(GetErrorString, "cuGetErrorString")                    \
    X(StreamBeginCapture, "cuStreamBeginCapture_v2")         \
    X(StreamEndCapture, "cuStreamEndCapture")                \
    X(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") \
    X(GraphLaunch, "cuGraphLaunch")                          \
    X(GraphExecDestroy, "cuGraphExecDestroy")                \
    X(GraphDestroy, "cuGraphDestroy")                        \
    X(TensorMapEncodeTiled, "cuTensorMapEncodeTiled")

static void driver_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(drv.why, sizeof drv.why, "libcuda.so.1 not found (no NVIDIA driver): %s", e ? e : "unknown reason");
        return;
    }
    /* the handle stays open for the process: kernels and contexts live in it */
#define LOOKUP(field, name)                                                                     \
    {                                                                                           \
        void *sym_ = dlsym(h, name);                                                            \
        memcpy(&drv.api.field, &sym_, sizeof sym_);                                             \
    }                                                                                           \
    if (!drv.api.field) {                                                                       \
        snprintf(drv.why, sizeof drv.why, "libcuda.so.1 has no %s (a driver older than CUDA 12?)", name); \
        return;                                                                                 \
    }
    SYMBOLS(LOOKUP)
#undef LOOKUP
    CUresult r = drv.api.Init(0);
    if (r != CUDA_SUCCESS) {
        char text[200];
        snprintf(drv.why, sizeof drv.why, "cuInit failed: %s", cuda_error_text(r, text, sizeof text));
        return;
    }
    drv.ok = true;
}

const cuda_driver *cuda_driver_get(char *why, size_t why_cap)
{
    call_once(&drv.once, driver_load);
    if (!drv.ok && why_cap)
        snprintf(why, why_cap, "%s", drv.why);
    return drv.ok ? &drv.api : NULL;
}

bool cuda_error_is_sticky(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_DEINITIALIZED:
        return true;
    default:
        return false;
    }
}

burnc_status_t cuda_status_of(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return BURNC_OK;
    if (cuda_error_is_sticky(r))
        return BURNC_ERR_DEVICE_LOST;
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return BURNC_ERR_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
        return BURNC_ERR_COMPILE;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
        return BURNC_ERR_UNAVAILABLE;
    default:
        return BURNC_ERR_EXECUTION;
    }
}

const char *cuda_error_text(CUresult r, char *buf, size_t cap)
{
    const char *name = NULL, *text = NULL;
    if (drv.api.GetErrorName && drv.api.GetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (drv.api.GetErrorString && drv.api.GetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    if (name)
        snprintf(buf, cap, "%s (%s)", name, text ? text : "no description");
    else
        snprintf(buf, cap, "CUresult %d", (int)r);
    return buf;
}

burnc_status_t cuda_fail(CUresult r, const char *fmt, ...)
{
    char what[320], text[180];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return rt_fail(cuda_status_of(r), "%s: %s", what, cuda_error_text(r, text, sizeof text));
}
