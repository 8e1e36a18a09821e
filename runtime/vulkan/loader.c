/* The Vulkan loader, opened with dlopen (burnc runs without it), one instance per process, and
 * the choice of a physical device from a spec. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc_config.h"
#include "vk.h"

static once_flag load_once = ONCE_FLAG_INIT;
static vk_api api;
static char load_error[256];

static void load(void)
{
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "libvulkan.so.1 not found (no Vulkan loader): %s", e ? e : "");
        return;
    }
    api.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    if (!api.vkGetInstanceProcAddr) {
        snprintf(load_error, sizeof load_error, "libvulkan.so.1 has no vkGetInstanceProcAddr");
        return;
    }
#define VK_GET_GLOBAL(name) api.name = (PFN_##name)api.vkGetInstanceProcAddr(NULL, #name);
    VK_GLOBAL_FNS(VK_GET_GLOBAL)
#undef VK_GET_GLOBAL
    uint32_t version = VK_API_VERSION_1_0;
    if (api.vkEnumerateInstanceVersion)
        api.vkEnumerateInstanceVersion(&version);
    if (version < VK_API_VERSION_1_1) {
        snprintf(load_error, sizeof load_error, "the Vulkan loader offers 1.0 only (1.1 needed)");
        return;
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "burnc",
                             .pEngineName = "burnc", .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkResult r = api.vkCreateInstance(&ci, NULL, &api.instance);
    if (r != VK_SUCCESS) {
        snprintf(load_error, sizeof load_error, "vkCreateInstance failed (VkResult %d)", (int)r);
        return;
    }
#define VK_GET_INSTANCE(name) api.name = (PFN_##name)api.vkGetInstanceProcAddr(api.instance, #name);
    VK_INSTANCE_FNS(VK_GET_INSTANCE)
#undef VK_GET_INSTANCE
    uint32_t n = sizeof api.phys / sizeof api.phys[0];
    r = api.vkEnumeratePhysicalDevices(api.instance, &n, api.phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        snprintf(load_error, sizeof load_error, "vkEnumeratePhysicalDevices failed (VkResult %d)", (int)r);
        api.vkDestroyInstance(api.instance, NULL);
        api.instance = VK_NULL_HANDLE;
        return;
    }
    api.n_phys = (int)n;
}

const vk_api *vk_load(char *why, size_t cap)
{
    call_once(&load_once, load);
    if (!api.instance) {
        snprintf(why, cap, "%s", load_error);
        return NULL;
    }
    return &api;
}

void vk_load_device(vk_api *a, VkDevice dev)
{
#define VK_GET_DEVICE(name) a->name = (PFN_##name)a->vkGetDeviceProcAddr(dev, #name);
    VK_DEVICE_FNS(VK_GET_DEVICE)
#undef VK_GET_DEVICE
}

const char *vk_type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static VkPhysicalDeviceType type_of(const vk_api *a, int i)
{
    VkPhysicalDeviceProperties p;
    a->vkGetPhysicalDeviceProperties(a->phys[i], &p);
    return p.deviceType;
}

/* The n-th device of a type (any type when `type` is -1). */
static int nth_of_type(const vk_api *a, int type, long n)
{
    for (int i = 0; i < a->n_phys; i++)
        if ((type < 0 || type_of(a, i) == (VkPhysicalDeviceType)type) && n-- == 0)
            return i;
    return -1;
}

/* Parses "N", "discrete[:N]", "cpu[:N]" (what follows "vulkan:"). */
static int select_form(const vk_api *a, const char *form, const char *spec, char *why, size_t cap)
{
    int type = -1;
    const char *num = form;
    if (strncmp(form, "discrete", 8) == 0 && (form[8] == ':' || !form[8])) {
        type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
        num = form[8] ? form + 9 : "0";
    } else if (strncmp(form, "cpu", 3) == 0 && (form[3] == ':' || !form[3])) {
        type = VK_PHYSICAL_DEVICE_TYPE_CPU;
        num = form[3] ? form + 4 : "0";
    }
    char *end;
    errno = 0;
    long n = strtol(num, &end, 10);
    if (!*num || *end || errno || n < 0) {
        snprintf(why, cap, "bad Vulkan device selector \"%s\" in %s (expected N, discrete[:N] or cpu[:N])", form, spec);
        return -1;
    }
    int i = nth_of_type(a, type, n);
    if (i < 0) {
        int count = 0;
        for (int j = 0; j < a->n_phys; j++)
            count += type < 0 || type_of(a, j) == (VkPhysicalDeviceType)type;
        snprintf(why, cap, "%s: no such Vulkan device: %d %s%sdevice%s found", spec, count,
                 type < 0 ? "" : vk_type_name((VkPhysicalDeviceType)type), type < 0 ? "" : " ", count == 1 ? "" : "s");
    }
    return i;
}

int vk_select(const vk_api *a, const char *spec, char *why, size_t cap)
{
    const char *rest = strncmp(spec, "vulkan", 6) == 0 ? spec + 6 : spec;
    if (*rest == ':')
        return select_form(a, rest + 1, spec, why, cap);
    const char *env = getenv("BURNC_VULKAN_DEVICE");
    if (env && *env) {
        const char *form = strncmp(env, "vulkan:", 7) == 0 ? env + 7 : env;
        char what[128];
        snprintf(what, sizeof what, "BURNC_VULKAN_DEVICE=%s", env);
        return select_form(a, form, what, why, cap);
    }
    for (int i = 0; i < a->n_phys; i++)
        if (type_of(a, i) != VK_PHYSICAL_DEVICE_TYPE_CPU)
            return i;
    if (a->n_phys == 0)
        snprintf(why, cap, "the Vulkan loader found no device (no driver installed?)");
    return a->n_phys ? 0 : -1;
}
