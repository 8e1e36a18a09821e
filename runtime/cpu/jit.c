/* Compiled kernels of the cpu device: a memory cache by structure, the disk cache of compiled
 * objects, and the LLVM code generator (runtime/llvm_module.h), loaded on the first compile. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "burnc_config.h"
#include "codegen/kcache.h"
#include "cpu.h"

/* The compiler part of disk cache keys, known without loading LLVM (the build's LLVM). */
#ifdef BURNC_LLVM_VERSION
#define COMPILER_ID "llvm-" BURNC_LLVM_VERSION
#else
#define COMPILER_ID "llvm-19"
#endif

/* ---- The memory cache ---- */

void cpu_kernel_cache_init(cpu_kernel_cache *c)
{
    memset(c, 0, sizeof *c);
    mtx_init(&c->lock, mtx_plain);
}

static void kernel_free(rt_kernel *k)
{
    if (k->from_object)
        cg_object_release(&k->fn);
    else /* compiled here, so the module is loaded */
        rt_llvm_api()->release_cpu(&k->fn);
    kir_free(&k->ir);
    free(k);
}

static void drop(rt_ktable_node *n, void *user)
{
    (void)user;
    kernel_free((rt_kernel *)n);
}

void cpu_kernel_cache_free(cpu_kernel_cache *c)
{
    kc_lazy_close(&c->disk);
    rt_ktable_clear(&c->table, drop, NULL);
    mtx_destroy(&c->lock);
}

static bool same_slots(const kir_kernel *a, const kir_slot *x, const kir_slot *y, int n)
{
    for (int s = 0; s < n; s++) {
        if (x[s].dtype != y[s].dtype)
            return false;
        for (int d = 0; d < a->rank; d++)
            if (x[s].stride[d] != y[s].stride[d])
                return false;
    }
    return true;
}

/* Structural equality over what kir_hash hashes: a hash collision must not run another
 * kernel's code. */
static bool same_kernel(const kir_kernel *a, const kir_kernel *b)
{
    if (a->rank != b->rank || a->n_outer != b->n_outer || a->n_scalars != b->n_scalars ||
        a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_stages != b->n_stages ||
        a->n_stores != b->n_stores || a->n_insts != b->n_insts)
        return false;
    if (!same_slots(a, a->inputs, b->inputs, a->n_inputs) || !same_slots(a, a->outputs, b->outputs, a->n_outputs) ||
        memcmp(a->in_place, b->in_place, (size_t)a->n_outputs) != 0)
        return false;
    for (int s = 0; s < a->n_stages; s++)
        if (a->stages[s].combiner != b->stages[s].combiner || a->stages[s].value != b->stages[s].value)
            return false;
    for (int s = 0; s < a->n_stores; s++)
        if (a->stores[s].slot != b->stores[s].slot || a->stores[s].value != b->stores[s].value ||
            a->stores[s].row != b->stores[s].row)
            return false;
    for (int i = 0; i < a->n_insts; i++) {
        const kir_inst *x = &a->insts[i], *y = &b->insts[i];
        if (x->op != y->op || x->type != y->type || x->a != y->a || x->b != y->b || x->c != y->c ||
            x->imm.u != y->imm.u)
            return false;
    }
    return true;
}

static rt_kernel *lookup(cpu_kernel_cache *c, const kir_kernel *k, uint64_t key, int width)
{
    for (rt_ktable_node *n = rt_ktable_chain(&c->table, key); n; n = n->next) {
        rt_kernel *e = (rt_kernel *)n;
        if (n->key == key && e->width == width && same_kernel(&e->ir, k))
            return e;
    }
    return NULL;
}

/* ---- Building one kernel ---- */

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* A deep copy: the caller's kernel belongs to a fusion plan that is freed after the flush. */
static bool copy_ir(kir_kernel *dst, const kir_kernel *src)
{
    *dst = *src;
    dst->insts = NULL;
    dst->cap_insts = dst->n_insts;
    if (src->n_insts > 0) {
        dst->insts = malloc((size_t)src->n_insts * sizeof *dst->insts);
        if (!dst->insts)
            return false;
        memcpy(dst->insts, src->insts, (size_t)src->n_insts * sizeof *dst->insts);
    }
    return true;
}

/* BURNC_DUMP_DIR: the kernel's IR listing as <name>-<key>.kir. */
static void dump_kernel(const kir_kernel *k, uint64_t key)
{
    const char *dir = getenv("BURNC_DUMP_DIR");
    if (!dir || !*dir)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s-%016llx.kir", dir, k->name[0] ? k->name : "kernel", (unsigned long long)key);
    char *text = kir_print(k);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (f) {
        fputs(text, f);
        fclose(f);
    } else {
        rt_log("codegen", "cannot write %s: %s", path, text ? strerror(errno) : "out of memory");
    }
    free(text);
}

/* The disk cache, opened on the first miss in memory (kc_open logs why it refuses). */
static kc_cache *disk_cache(cpu_kernel_cache *c)
{
    mtx_lock(&c->lock);
    kc_cache *d = kc_lazy_open(&c->disk);
    mtx_unlock(&c->lock);
    return d;
}

/* A kernel compiled by an earlier process: no LLVM. A damaged or foreign object is logged
 * and compiled again (kc_put then replaces it). */
static bool load_from_disk(kc_cache *disk, uint64_t disk_key, rt_kernel *k)
{
    void *obj;
    size_t size;
    if (!disk || !kc_get(disk, disk_key, &obj, &size))
        return false;
    char err[512] = "";
    bool ok = cg_object_load(obj, size, &k->fn, err, sizeof err);
    free(obj);
    if (!ok)
        rt_log("codegen", "%s: cached object unusable (%s): compiling again", k->ir.name, err);
    k->from_object = ok;
    return ok;
}

static burnc_status_t compile_llvm(kc_cache *disk, uint64_t disk_key, rt_kernel *k, bool *stored)
{
    const cg_llvm_api *api = rt_llvm_api();
    if (!api)
        return BURNC_ERR_UNAVAILABLE;
    char err[1024] = "";
    void *obj = NULL;
    size_t size = 0;
    cg_cpu_options opt = {.elem_width = k->width};
    if (!api->compile_cpu_with(&k->ir, &opt, &k->fn, disk ? &obj : NULL, disk ? &size : NULL, err, sizeof err))
        return rt_fail(BURNC_ERR_COMPILE, "cpu: compiling %s failed: %s", k->ir.name, err);
    *stored = obj && kc_put(disk, disk_key, obj, size);
    free(obj);
    return BURNC_OK;
}

/* Memory, then disk, then LLVM; the new kernel joins the memory cache. */
static burnc_status_t build(cpu_kernel_cache *c, const kir_kernel *k, uint64_t key, int width, rt_kernel **out)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rt_kernel *nk = calloc(1, sizeof *nk);
    if (!nk || !copy_ir(&nk->ir, k)) {
        free(nk);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: out of memory for kernel %s", k->name);
    }
    nk->kind = CPU_KERNEL_COMPILED;
    nk->node.key = key;
    nk->width = width;
    rt_kir_output_deps(k, nk->out_deps);
    dump_kernel(k, key);
    kc_cache *disk = disk_cache(c);
    /* the default width is the historical key, so caches written before widths were tuned hit */
    uint64_t disk_key = kc_key(width ? key ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)width) : key,
                               kc_host_fingerprint(), COMPILER_ID);
    if (load_from_disk(disk, disk_key, nk)) {
        rt_log("codegen", "%s %016llx: disk hit, loaded in %.2f ms", k->name, (unsigned long long)key, ms_since(&t0));
    } else {
        bool stored = false;
        burnc_status_t s = compile_llvm(disk, disk_key, nk, &stored);
        if (s != BURNC_OK) {
            kir_free(&nk->ir);
            free(nk);
            return s;
        }
        rt_log("codegen", "%s %016llx: miss, compiled in %.2f ms%s", k->name, (unsigned long long)key,
               ms_since(&t0), stored ? ", stored on disk" : "");
    }
    mtx_lock(&c->lock);
    bool ok = rt_ktable_insert(&c->table, &nk->node);
    mtx_unlock(&c->lock);
    if (!ok) {
        kernel_free(nk);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: out of memory for the kernel cache");
    }
    *out = nk;
    return BURNC_OK;
}

int cpu_default_width(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f") ? 16 : 8;
#else
    return 8;
#endif
}

burnc_status_t cpu_kernel_get(cpu_kernel_cache *c, const kir_kernel *k, uint64_t key, int width, rt_kernel **out)
{
    if (width == cpu_default_width())
        width = 0; /* one kernel for the default, however it is asked for */
    mtx_lock(&c->lock);
    rt_kernel *hit = lookup(c, k, key, width);
    mtx_unlock(&c->lock);
    if (!hit)
        return build(c, k, key, width, out);
    rt_log("codegen", "%s %016llx: memory hit", k->name, (unsigned long long)key);
    *out = hit;
    return BURNC_OK;
}
