/* The LLVM code generator module, found beside libburnc and opened once. See llvm_module.h. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "burnc_config.h"
#include "llvm_module.h"
#include "rt.h"

#define LLVM_MODULE_NAME "burnc-llvm.so"

/* BURNC_LLVM_MODULE when set (a test executable linked statically has no libburnc.so to
 * stand beside), else burnc-llvm.so in the directory of the file holding this code, else in
 * the library directory burnc was installed to (programs linked statically, like burnc-tune,
 * live in bin/). */
static bool module_path(char *out, size_t cap, char *why, size_t why_cap)
{
    const char *env = getenv("BURNC_LLVM_MODULE");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return true;
    }
    Dl_info info;
    char real[PATH_MAX];
    if (!dladdr((void *)module_path, &info) || !info.dli_fname || !realpath(info.dli_fname, real)) {
        snprintf(why, why_cap, "cannot locate libburnc to find %s beside it (set BURNC_LLVM_MODULE)",
                 LLVM_MODULE_NAME);
        return false;
    }
    snprintf(out, cap, "%s/%s", dirname(real), LLVM_MODULE_NAME);
#ifdef BURNC_LIBDIR
    char installed[PATH_MAX];
    snprintf(installed, sizeof installed, "%s/%s", BURNC_LIBDIR, LLVM_MODULE_NAME);
    if (access(out, R_OK) != 0 && access(installed, R_OK) == 0)
        snprintf(out, cap, "%s", installed);
#endif
    return true;
}

bool rt_llvm_module_find(char *why, size_t why_cap)
{
    char path[PATH_MAX + 32];
    if (!module_path(path, sizeof path, why, why_cap))
        return false;
    if (access(path, R_OK) != 0) {
        snprintf(why, why_cap, "the LLVM code generator %.300s is missing (%s)", path, strerror(errno));
        return false;
    }
    return true;
}

bool rt_llvm_module_available(void)
{
    char why[512];
    return rt_llvm_module_find(why, sizeof why);
}

static struct {
    once_flag once;
    const cg_llvm_api *api;
    atomic_bool loaded;
    char error[PATH_MAX + 640];
} llvm = {.once = ONCE_FLAG_INIT};

static void llvm_load(void)
{
    char path[PATH_MAX + 32];
    if (!module_path(path, sizeof path, llvm.error, sizeof llvm.error))
        return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(llvm.error, sizeof llvm.error, "cannot load the LLVM code generator: %s", e ? e : path);
        return;
    }
    atomic_store(&llvm.loaded, true);
    const cg_llvm_api *api = dlsym(h, "burnc_llvm_api");
    if (!api || api->abi != CG_LLVM_ABI) {
        /* the module stays mapped: libLLVM is NODELETE anyway, and a half-loaded module is rare */
        snprintf(llvm.error, sizeof llvm.error, "%s: %s", path,
                 api ? "built for another burnc (ABI mismatch)" : "no burnc_llvm_api table");
        return;
    }
    llvm.api = api;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rt_log("codegen", "loaded %s (LLVM %s) in %.1f ms", path, api->llvm_version,
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
}

const cg_llvm_api *rt_llvm_api(void)
{
    call_once(&llvm.once, llvm_load);
    if (!llvm.api)
        rt_fail(BURNC_ERR_UNAVAILABLE, "codegen: %s", llvm.error);
    return llvm.api;
}

bool rt_llvm_loaded(void) { return atomic_load(&llvm.loaded); }
