/* Devices: the registry of open devices, spec parsing, the default device, configuration. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc_config.h"
#include "rt.h"

/* Backends that are not written yet (cuda, vulkan): they enumerate nothing and refuse to open
 * with a reason. Their issues replace these with real tables in runtime/<kind>/. */
#if !BURNC_WANT_CUDA || !BURNC_HAVE_VULKAN
static int none_enumerate(burnc_device_info_t *out, int cap)
{
    (void)out;
    (void)cap;
    return 0;
}

/* Says which part is missing: the driver library, or burnc's backend. */
static burnc_status_t missing_open(rt_device *dev, const char *lib, const char *what)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s not found (%s): %s", dev->spec, lib,
                       what, why ? why : "unknown reason");
    }
    dlclose(h);
    return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: %s: %s is present but the %s backend is not part "
                   "of burnc %s yet", dev->spec, lib, dev->be->kind, BURNC_VERSION);
}
#endif

#if !BURNC_WANT_CUDA
static burnc_status_t cuda_open(rt_device *dev, int index)
{
    (void)index;
    return missing_open(dev, "libcuda.so.1", "no NVIDIA driver");
}
#endif

#if !BURNC_HAVE_VULKAN
static burnc_status_t vulkan_open(rt_device *dev, int index)
{
    (void)index;
    return missing_open(dev, "libvulkan.so.1", "no Vulkan loader");
}
#endif

#if BURNC_WANT_CUDA
#define cuda_backend rt_cuda_backend
#else
static const rt_backend cuda_backend = {.kind = "cuda", .type = BURNC_DEVICE_CUDA, .enumerate = none_enumerate,
                                        .open = cuda_open};
#endif
#if BURNC_HAVE_VULKAN
#define vulkan_backend rt_vulkan_backend
#else
static const rt_backend vulkan_backend = {.kind = "vulkan", .type = BURNC_DEVICE_VULKAN,
                                          .enumerate = none_enumerate, .open = vulkan_open};
#endif

/* In the order of preference for the default device (DESIGN.md). */
static const rt_backend *const backends[] = {&cuda_backend, &vulkan_backend, &rt_cpu_backend, &rt_ref_backend};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

static mtx_t registry_lock;
static once_flag registry_once = ONCE_FLAG_INIT;
static rt_device *registry;

static void registry_init(void) { mtx_init(&registry_lock, mtx_plain); }

/* Parses "kind", "kind:N" or "vulkan:<selector>[:N]" into a backend and a normalized spec. */
static burnc_status_t parse_spec(const char *spec, const rt_backend **out_be, int *out_index, char *norm,
                                 size_t cap)
{
    size_t klen = strcspn(spec, ":");
    const rt_backend *be = NULL;
    for (int i = 0; i < N_BACKENDS; i++)
        if (strlen(backends[i]->kind) == klen && strncmp(spec, backends[i]->kind, klen) == 0)
            be = backends[i];
    if (!be)
        return rt_fail(BURNC_ERR_UNKNOWN_DEVICE,
                       "burnc_device_open: unknown device \"%s\" (expected ref, cpu, cuda[:N] or vulkan[:N])", spec);
    const char *rest = spec[klen] == ':' ? spec + klen + 1 : NULL;
    long index = 0;
    bool selector = false; /* vulkan:discrete[:N], vulkan:cpu[:N]: the backend resolves them */
    if (rest && be == &vulkan_backend && strncmp(rest, "discrete", 8) == 0 && (rest[8] == ':' || !rest[8])) {
        rest = rest[8] ? rest + 9 : NULL;
        selector = true;
    } else if (rest && be == &vulkan_backend && strncmp(rest, "cpu", 3) == 0 && (rest[3] == ':' || !rest[3])) {
        rest = rest[3] ? rest + 4 : NULL;
        selector = true;
    }
    if (rest) {
        char *end;
        errno = 0;
        index = strtol(rest, &end, 10);
        if (!*rest || *end || errno || index < 0 || index > 1000)
            return rt_fail(BURNC_ERR_INVALID_ARGUMENT,
                           "burnc_device_open: bad device index in \"%s\" (expected %s:N with N >= 0)", spec,
                           be->kind);
    }
    *out_be = be;
    *out_index = (int)index;
    if (be == &vulkan_backend && (selector || !spec[klen]))
        snprintf(norm, cap, "%s", spec); /* a selector, or plain "vulkan" (BURNC_VULKAN_DEVICE's choice) */
    else
        snprintf(norm, cap, "%s:%d", be->kind, (int)index);
    if ((be == &rt_ref_backend || be == &rt_cpu_backend) && index == 0)
        snprintf(norm, cap, "%s", be->kind); /* ref:N (N > 0) are further, independent ref devices */
    return BURNC_OK;
}

static burnc_status_t default_spec(char *out, size_t cap)
{
    const char *env = getenv("BURNC_DEVICE");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return BURNC_OK;
    }
    for (int i = 0; i < N_BACKENDS; i++) {
        burnc_device_info_t info;
        /* a CPU Vulkan device (lavapipe) is never the default */
        if (backends[i]->enumerate(&info, 1) > 0 &&
            !(backends[i] == &vulkan_backend && strstr(info.spec, "cpu"))) {
            snprintf(out, cap, "%s", info.spec);
            return BURNC_OK;
        }
    }
    return rt_fail(BURNC_ERR_INTERNAL, "burnc_device_open: no device available");
}

static rt_device *device_create(const rt_backend *be, int index, const char *spec)
{
    rt_device *dev = calloc(1, sizeof *dev);
    if (!dev) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: out of memory");
        return NULL;
    }
    dev->be = be;
    dev->type = be->type;
    dev->index = index;
    snprintf(dev->spec, sizeof dev->spec, "%s", spec);
    dev->float_dtype = BURNC_DTYPE_F32;
    dev->int_dtype = BURNC_DTYPE_I64;
    if (be->open(dev, index) != BURNC_OK) {
        free(dev);
        return NULL;
    }
    atomic_init(&dev->refs, 1);
    atomic_init(&dev->handles, 1);
    mtx_init(&dev->lock, mtx_plain);
    mtx_init(&dev->exec_lock, mtx_plain);
    rt_pool_init(&dev->pool);
    return dev;
}

burnc_device_t *burnc_device_open(const char *spec)
{
    char buf[64], norm[64];
    if (!spec || !*spec) {
        if (default_spec(buf, sizeof buf) != BURNC_OK)
            return NULL;
        spec = buf;
    }
    const rt_backend *be = NULL;
    int index = 0;
    if (parse_spec(spec, &be, &index, norm, sizeof norm) != BURNC_OK)
        return NULL;
    call_once(&registry_once, registry_init);
    mtx_lock(&registry_lock);
    rt_device *dev = registry;
    while (dev && strcmp(dev->spec, norm) != 0)
        dev = dev->next;
    /* a device whose count already reached zero is being closed: open a new one */
    int refs = dev ? atomic_load(&dev->refs) : 0;
    while (refs > 0 && !atomic_compare_exchange_weak(&dev->refs, &refs, refs + 1))
        ;
    if (refs > 0)
        atomic_fetch_add(&dev->handles, 1);
    if (refs == 0) {
        dev = device_create(be, index, norm);
        if (dev) {
            dev->next = registry;
            registry = dev;
        }
    }
    mtx_unlock(&registry_lock);
    return dev;
}

burnc_device_t *burnc_device_retain(burnc_device_t *dev)
{
    if (dev) {
        atomic_fetch_add(&dev->refs, 1);
        atomic_fetch_add(&dev->handles, 1);
    }
    return dev;
}

static void device_destroy(rt_device *dev)
{
    rt_kernels_free(dev);
    rt_stream_free(&dev->stream);
    rt_pool_trim(dev);
    if (dev->be->close)
        dev->be->close(dev);
    mtx_destroy(&dev->pool.lock);
    mtx_destroy(&dev->lock);
    mtx_destroy(&dev->exec_lock);
    free(dev);
}

/* Drops an internal reference (storages hold one each). */
void rt_device_unref(rt_device *dev)
{
    if (atomic_fetch_sub(&dev->refs, 1) != 1)
        return;
    mtx_lock(&registry_lock);
    for (rt_device **p = &registry; *p; p = &(*p)->next)
        if (*p == dev) {
            *p = dev->next;
            break;
        }
    mtx_unlock(&registry_lock);
    device_destroy(dev);
}

void burnc_device_release(burnc_device_t *dev)
{
    if (!dev)
        return;
    if (dev->base) { /* an autodiff handle (autodiff/tape.c) */
        if (atomic_fetch_sub(&dev->refs, 1) == 1) {
            burnc_device_release(dev->base);
            free(dev);
        }
        return;
    }
    /* Records nobody will read would otherwise keep their storages, and so the device, alive. */
    if (atomic_fetch_sub(&dev->handles, 1) == 1) {
        rt_error_state saved;
        rt_error_save(&saved);
        rt_flush(dev);
        rt_error_restore(&saved);
    }
    rt_device_unref(dev);
}

int burnc_device_enumerate(unsigned types, burnc_device_info_t *out, int capacity)
{
    int n = 0;
    for (int i = 0; i < N_BACKENDS; i++) {
        if (!(backends[i]->type & types))
            continue;
        int room = out && capacity > n ? capacity - n : 0;
        n += backends[i]->enumerate(room ? out + n : NULL, room);
    }
    return n;
}

/* Every public function resolves an autodiff handle to its device (rt_dev) first. */
const char *burnc_device_name(const burnc_device_t *dev) { return dev ? rt_dev(dev)->name : ""; }
const char *burnc_device_spec(const burnc_device_t *dev) { return dev ? rt_dev(dev)->spec : ""; }
burnc_device_type_t burnc_device_type(const burnc_device_t *dev) { return dev ? rt_dev(dev)->type : 0; }
/* Ignores the autodiff context: handles are equal when they share the compute resource. */
bool burnc_device_equal(const burnc_device_t *a, const burnc_device_t *b) { return a && rt_dev(a) == rt_dev(b); }
burnc_dtype_t burnc_device_float_dtype(const burnc_device_t *dev) { return dev ? rt_dev(dev)->float_dtype : 0; }
burnc_dtype_t burnc_device_int_dtype(const burnc_device_t *dev) { return dev ? rt_dev(dev)->int_dtype : 0; }

bool burnc_device_supports_dtype(const burnc_device_t *dev, burnc_dtype_t dtype)
{
    return dev && ir_dtype_valid(dtype) && rt_dev(dev)->be->supports_dtype(rt_dev(dev), dtype);
}

bool burnc_device_flushes_denormals(const burnc_device_t *dev, burnc_dtype_t dtype)
{
    return dev && ir_dtype_valid(dtype) && rt_dev(dev)->be->flushes_denormals &&
           rt_dev(dev)->be->flushes_denormals(rt_dev(dev), dtype);
}

#define CHECK_DEV(dev, fn)                                                         \
    do {                                                                           \
        if (!(dev))                                                                \
            return rt_fail(BURNC_ERR_INVALID_ARGUMENT, fn ": device is NULL");     \
        (dev) = rt_dev(dev);                                                       \
    } while (0)

burnc_status_t burnc_device_configure(burnc_device_t *dev, const burnc_device_config_t *cfg)
{
    CHECK_DEV(dev, "burnc_device_configure");
    if (!cfg)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_configure: config is NULL");
    burnc_dtype_t f = cfg->float_dtype ? cfg->float_dtype : BURNC_DTYPE_F32;
    burnc_dtype_t i = cfg->int_dtype ? cfg->int_dtype : BURNC_DTYPE_I64;
    if (!ir_dtype_is_float(f) || !dev->be->supports_dtype(dev, f))
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_device_configure: %s cannot be the float dtype of %s",
                       ir_dtype_name(f), dev->spec);
    if ((i != BURNC_DTYPE_I32 && i != BURNC_DTYPE_I64) || !dev->be->supports_dtype(dev, i))
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_device_configure: %s cannot be the int dtype of %s "
                       "(i32 or i64)", ir_dtype_name(i), dev->spec);
    burnc_status_t s = BURNC_OK;
    mtx_lock(&dev->lock);
    if (atomic_load(&dev->initialized)) {
        s = rt_fail(BURNC_ERR_ALREADY_INITIALIZED,
                    "burnc_device_configure: %s already has tensors; configure it before the first one", dev->spec);
    } else {
        dev->float_dtype = f;
        dev->int_dtype = i;
    }
    mtx_unlock(&dev->lock);
    return s;
}

void rt_device_mark_used(rt_device *dev)
{
    if (!atomic_load_explicit(&dev->initialized, memory_order_relaxed)) {
        mtx_lock(&dev->lock);
        atomic_store(&dev->initialized, true);
        mtx_unlock(&dev->lock);
    }
}

void rt_device_set_error(rt_device *dev, burnc_status_t code, const char *msg)
{
    if (dev->pending_error == BURNC_OK) {
        dev->pending_error = code;
        snprintf(dev->pending_msg, sizeof dev->pending_msg, "%s", msg);
    }
}

burnc_status_t burnc_device_seed(burnc_device_t *dev, uint64_t seed)
{
    CHECK_DEV(dev, "burnc_device_seed");
    mtx_lock(&dev->lock);
    dev->seed = seed;
    dev->rng_counter = 0;
    mtx_unlock(&dev->lock);
    return BURNC_OK;
}

burnc_status_t burnc_device_flush(burnc_device_t *dev)
{
    CHECK_DEV(dev, "burnc_device_flush");
    return rt_flush(dev);
}

/* s, or the execution error recorded since the last wait (taken: reported once); exec_lock held. */
static burnc_status_t take_pending(rt_device *dev, burnc_status_t s)
{
    if (s == BURNC_OK && dev->pending_error != BURNC_OK) {
        s = rt_fail(dev->pending_error, "%s", dev->pending_msg);
        dev->pending_error = BURNC_OK;
    }
    return s;
}

burnc_status_t burnc_device_sync(burnc_device_t *dev)
{
    CHECK_DEV(dev, "burnc_device_sync");
    burnc_status_t s = rt_flush(dev);
    if (s != BURNC_OK)
        return s;
    mtx_lock(&dev->exec_lock);
    s = take_pending(dev, dev->be->sync(dev));
    mtx_unlock(&dev->exec_lock);
    return s;
}

burnc_status_t burnc_device_memory_cleanup(burnc_device_t *dev)
{
    CHECK_DEV(dev, "burnc_device_memory_cleanup");
    rt_pool_trim(dev);
    return BURNC_OK;
}

burnc_status_t burnc_device_copy_time(burnc_device_t *dev, size_t bytes, int reps, double *seconds)
{
    CHECK_DEV(dev, "burnc_device_copy_time");
    if (!seconds || bytes == 0 || reps < 1)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_copy_time: bytes %zu, reps %d, seconds %p: "
                       "need bytes > 0, reps >= 1 and a place for the result", bytes, reps, (void *)seconds);
    if (!dev->be->copy_time)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_copy_time: %s has no copy engine of its own (its "
                       "memory is the host's: measure host memory instead)", dev->spec);
    mtx_lock(&dev->exec_lock);
    burnc_status_t s = dev->be->copy_time(dev, bytes, reps, seconds);
    mtx_unlock(&dev->exec_lock);
    return s;
}

/* start (stop false) or stop of the device timer; fn names the public call. */
static burnc_status_t timer(rt_device *dev, bool stop, double *seconds, const char *fn)
{
    if (!dev->be->timer_mark)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "%s: %s runs on the host and has no clock of its own: time it on the "
                       "host around burnc_device_sync", fn, dev->spec);
    RT_TRY(rt_flush(dev));
    mtx_lock(&dev->exec_lock);
    burnc_status_t s = BURNC_OK;
    if (stop && !dev->timing)
        s = rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: %s: no burnc_device_timer_start before it", fn, dev->spec);
    else
        s = dev->be->timer_mark(dev, stop, seconds);
    dev->timing = !stop && s == BURNC_OK;
    if (stop)
        s = take_pending(dev, s);
    mtx_unlock(&dev->exec_lock);
    return s;
}

burnc_status_t burnc_device_timer_start(burnc_device_t *dev)
{
    CHECK_DEV(dev, "burnc_device_timer_start");
    return timer(dev, false, NULL, "burnc_device_timer_start");
}

burnc_status_t burnc_device_timer_stop(burnc_device_t *dev, double *seconds)
{
    CHECK_DEV(dev, "burnc_device_timer_stop");
    if (!seconds)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_timer_stop: seconds is NULL");
    *seconds = 0;
    return timer(dev, true, seconds, "burnc_device_timer_stop");
}

burnc_status_t burnc_device_memory(burnc_device_t *dev, burnc_memory_report_t *out)
{
    CHECK_DEV(dev, "burnc_device_memory");
    if (!out)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_memory: out is NULL");
    rt_pool_report(dev, out);
    return BURNC_OK;
}
